"""What a user asks for, validated before anything is created."""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field, replace

from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.errors import UsageError
from bufsize.topologies.line import check_line_buffer
from bufsize.topologies.line import default_burst_bytes as line_burst_bytes
from bufsize.topologies.machine import available_congestion_controls, delay_backend
from bufsize.topologies.units import check_buffer_bytes, check_number

MAX_HOSTS = 400
# Below 100 kb/s one frame holds the link for over 120 ms: a 1 s rate sample counts a handful of
# frames and tc's rate tables lose their precision; nothing the toolkit studies runs that slow.
MIN_RATE_MBPS = 0.1
MAX_RATE_MBPS = 10_000.0
# Delays are set in whole microseconds each way (netem) and a nonzero RTT must not round to none.
MIN_RTT_MS = 0.002
MAX_RTT_MS = 10_000.0
# htb and tbf are kernel qdiscs on the switch's port; line is the delay line's own FIFO and clock
# (topologies/line.py), so it needs the delay line backend.
TC_SHAPERS = ("htb", "tbf")
SHAPERS = (*TC_SHAPERS, "line")
# auto, the default, is the line on every kernel: it paced with far fewer departure gaps >10 % off
# than HTB or TBF on this VM (bench/results/shaper-ab.md), and HTB's burst answered a quarter of the
# line's buffer at N = 200 and 800 (results/hosts/). Where the kernel has netem the delay line still
# carries the delay as well: it must forward every frame to be the bottleneck anyway, so netem would
# only add a second queue and a kernel timer on the same path, and the delay line doing both is the
# method every committed result was measured with (topologies/machine.resolve_backend). auto never
# falls back to a kernel shaper: where the line cannot run (one CPU, or --delay-backend netem), the run
# is refused with the reason, and --shaper htb or tbf is the user's explicit choice.
SHAPER_CHOICES = ("auto", *SHAPERS)
# Sender hosts per CPU left to the traffic that the line was measured to keep up with (more run on the
# line too, with a warning before the run and in the result: line_capacity_warning). Without
# iperf's timer slack, 400 hosts saturated the one CPU the line leaves on a 2-core machine, half of
# it iperf 2's reporter threads waking every few ms (perf). With iperf's timer slack
# (buffersizing/traffic/longflows.py) and the toolkit's own threads off the line's CPU (topologies/dumbbell.py),
# 800 flows over 400 hosts left that CPU 29 % idle and the line put 1.0-1.3 % of gaps >10 % off,
# reference 0.995-1.000 of C, 3 of 3 runs valid (bench/results/shaper-scale/).
LINE_MAX_HOSTS_PER_CPU = 400
# The same for the rate: with one CPU for the traffic, 200 flows kept 0.99-1.00 of C at 155 and
# 200 Mb/s on the line, while at 1 Gb/s that CPU saturated and the link carried 0.96-0.97 of C
# (TCP with offloads off costs about a core per Gb/s here; bench/results/shaper-scale/, docs/scaling.md).
LINE_MAX_RATE_MBPS_PER_CPU = 200.0
# Bytes the shaper may send ahead of its rate. HTB's tokens are capped at its burst, so a dequeue
# that comes late by more than the burst's worth of time loses that capacity for good: with one frame
# the loaded 2-core VM lost 2 to 18 % of C while the queue stayed full. The HTB default is 2 ms of
# the rate, at most ten frames (ten frames from 60.6 Mb/s up, one frame at 6 Mb/s and below): in
# alternating runs ten frames against one kept 1.000 against 0.898 of C at 20 flows, 0.994 against
# 0.878 at 50 and 0.972 against 0.933 at 155 Mb/s (medians of 3); at 200 Mb/s and at 200 flows the
# runs overlapped, and at 800 flows on a CPU-bound machine ten frames had the lower median (0.947
# against 0.985, ranges overlapping): open in bench/results/htb-burst.md.
# 2 ms bounds how far the link can run ahead of C at any rate (0.2 % of a 1 s sample). TBF needs two
# frames; with one it falls ~8 % short of C on this kernel (bench/results/shaper-fidelity.md).
HTB_BURST_S = 0.002
HTB_MAX_BURST_FRAMES = 10
TBF_BURST = 2 * FRAME_BYTES


def shaper_choice(requested: str, backend: str, cpus: int | None = None) -> tuple[str, str]:
    """(the shaper a run uses for --shaper `requested` on the resolved delay backend, why); auto is the
    line or a refusal (UsageError), never a silent kernel shaper. How many hosts and how fast a link
    the line was measured to keep up with is line_capacity_warning's business: a warning, not a switch."""
    if requested != "auto":
        return requested, "asked for (--shaper)"
    if cpus is None:
        cpus = len(os.sched_getaffinity(0))
    if backend != "delayline":
        raise UsageError(
            "--shaper auto is the line, the delay line's own queue, and this run's delay is netem "
            "(--delay-backend netem): drop --delay-backend, or give --shaper htb or tbf for a kernel shaper"
        )
    if cpus < 2:
        raise UsageError(
            f"--shaper auto is the line, which needs a CPU of its own beside the traffic's, and this run may use "
            f"{cpus} CPU: give --shaper htb or tbf to shape with a kernel qdisc instead (it answers differently: "
            "HTB's burst makes up idle time a real link has lost: docs/network.md, the shaper)"
        )
    return "line", "default: the line on every kernel (topologies/config.py, bench/results/shaper-ab.md)"


def resolve_shaper(requested: str, backend: str, cpus: int | None = None) -> str:
    """The shaper of shaper_choice, without the reason."""
    return shaper_choice(requested, backend, cpus)[0]


def line_capacity_warning(shaper: str, hosts: int, cpus: int | None = None, rate_mbps: float = 0.0) -> str | None:
    """A warning, said before the run and kept in its result, when the line is asked to carry more
    sender hosts or a higher rate than it was measured to keep up with on this many CPUs; None when
    it fits."""
    if shaper != "line":
        return None
    if cpus is None:
        cpus = len(os.sched_getaffinity(0))
    if cpus < 2:
        return "1 CPU: the line spins on it while the queue is busy and the senders wait for it (give it 2 or more)"
    spare = cpus - 1
    over = []
    if hosts > LINE_MAX_HOSTS_PER_CPU * spare:
        over.append(f"{hosts} sender hosts (measured: {LINE_MAX_HOSTS_PER_CPU * spare})")
    if rate_mbps > LINE_MAX_RATE_MBPS_PER_CPU * spare:
        over.append(f"{rate_mbps:g} Mb/s (measured: {LINE_MAX_RATE_MBPS_PER_CPU * spare:g})")
    if not over:
        return None
    return (
        f"{' and '.join(over)} on {cpus} CPUs, beyond what the line was measured to keep up with here "
        f"({LINE_MAX_HOSTS_PER_CPU} hosts and {LINE_MAX_RATE_MBPS_PER_CPU:g} Mb/s per CPU beside its own; "
        "docs/scaling.md): the result's reference rate and pacing fidelity say whether it did"
    )


def default_burst_bytes(shaper: str, rate_mbps: float, pacer: bool = False) -> int:
    """The shaper's burst when none is given (the comment above gives the evidence)."""
    if shaper == "auto":
        raise ValueError("the shaper's burst depends on the shaper: resolve auto first (DumbbellConfig.for_backend)")
    if shaper == "line":
        return line_burst_bytes(rate_mbps)
    if shaper == "tbf":
        return TBF_BURST
    if pacer:
        return FRAME_BYTES  # the pacer releases each frame when due; it was measured with one frame
    two_ms = round(rate_mbps * 1e6 / 8 * HTB_BURST_S)
    return min(max(two_ms, FRAME_BYTES), HTB_MAX_BURST_FRAMES * FRAME_BYTES)


DELAY_BACKENDS = ("auto", "netem", "delayline")
# The delay line's pacer (topologies/delay.py): it kicks HTB when each frame is due instead of
# leaving every release to HTB's late, jittery watchdog timer. Only with HTB and the delay line.
# Interleaved 15 s `bufsize measure` runs (62.5 Mb/s, cubic) put 7.7 % of gaps >10 % off with it
# against 18.9 % without at 200 flows, 11.8 % against 20.1 % at 800 flows over 400 hosts
# (docs/network.md, the shaper; bench/results/pacing.md). But in a 150 s quick-preset search at N=10 with it on,
# the bottleneck's rate sank from 62 to about 37 Mb/s while its queue stayed full (the same search
# with it off held the rate), so it is off by default until that is understood: `--pacer on`.
PACER_DEFAULT = False
# How senders find a lost packet. "linux" leaves this kernel's default: RACK (time-based loss
# detection) and tail-loss probes. "dupack" turns both off in the senders' namespaces
# (net.ipv4.tcp_recovery=0, tcp_early_retrans=0): three duplicate ACKs or the RTO, as ns-2 and
# ns-3 3.44's TCP find losses, so a difference from the twin can be put to either cause.
LOSS_RECOVERIES = ("linux", "dupack")


def parse_rtts(spec: str, hosts: int) -> list[float]:
    """RTT per sender host from '87', a list '20,40,80' (one per host) or a range '20..300'.

    A range is spread evenly over the hosts, lowest to highest, so flows on different hosts
    see different RTTs and desynchronize as in the paper.
    """
    text = spec.strip()
    try:
        if ".." in text:
            lo_s, hi_s = text.split("..", 1)
            lo, hi = float(lo_s), float(hi_s)
            if hi < lo:
                raise UsageError(f"--rtt-ms {spec}: a range must go from low to high")
            values = [lo + (hi - lo) * i / (hosts - 1) for i in range(hosts)] if hosts > 1 else [lo]
        elif "," in text:
            values = [float(v) for v in text.split(",")]
            if len(values) != hosts:
                raise UsageError(f"--rtt-ms {spec}: a list needs one RTT per host ({hosts}), got {len(values)}")
        else:
            values = [float(text)] * hosts
    except ValueError as e:
        raise UsageError(f"--rtt-ms {spec}: expected a number, a list 'a,b,c' or a range 'lo..hi' in ms") from e
    for v in values:
        check_rtt_ms(v, spec)
    return values


def check_rtt_ms(value: float, spec: str | None = None) -> None:
    """One RTT: 0 (no added delay) or MIN_RTT_MS..MAX_RTT_MS; the message quotes what was typed."""
    if value == 0:
        return
    if not (math.isfinite(value) and MIN_RTT_MS <= value <= MAX_RTT_MS):
        given = spec if spec is not None else f"{value:g}"
        raise UsageError(f"--rtt-ms {given}: each RTT must be 0 or from {MIN_RTT_MS:g} to {MAX_RTT_MS:g} ms")


def tcp_changes(loss_recovery: str = "linux", delayed_ack: bool = True, sender_pacing: bool = False) -> list[str]:
    out = ["RACK and tail-loss probes off"] if loss_recovery == "dupack" else []
    out += [] if delayed_ack else ["delayed ACKs off"]
    return out + (["senders paced by TCP"] if sender_pacing else [])


def pacing_cap_bps(access_mbps: float, rate_mbps: float) -> int:
    """The SO_MAX_PACING_RATE a paced sender's sockets get: its access link's rate (10 x the bottleneck's
    where the access links are unshaped). Setting it at all is what turns on TCP's own pacing (no fq
    needed): each flow is then sent at TCP's pacing rate, 1.2 x cwnd / srtt in congestion avoidance
    (2 x in slow start), never above this cap."""
    return int((access_mbps or 10 * rate_mbps) * 1e6)


@dataclass
class DumbbellConfig:
    """A dumbbell: `hosts` senders -> switch -> receiver, bottleneck at the switch's receiver port."""

    hosts: int = 2
    rate_mbps: float = 62.5
    rtt_ms: list[float] = field(default_factory=lambda: [87.0, 87.0])
    buffer_bytes: int | None = None  # None: one bandwidth-delay product at the largest RTT
    shaper: str = "auto"  # resolved with the delay backend: for_backend()
    delay_backend: str = "auto"
    cc: str = "reno"
    access_mbps: float = 1000.0  # 0 leaves the access links unshaped
    burst_bytes: int | None = None  # None: the shaper's default, default_burst_bytes()
    pacer: bool = PACER_DEFAULT  # takes effect with shaper htb and the delay line (DumbbellPlan.pacing)
    loss_recovery: str = "linux"  # LOSS_RECOVERIES
    # The receiver's delayed ACKs (the kernel's: an ACK per two segments, a lone segment's after a
    # timer of 40 ms or more that adapts to the flow); False: every segment ACKed at once (the
    # route's quickack metric). bench/results/plateau/ measures what this does with many flows.
    delayed_ack: bool = True
    # The long-lived flows' senders pace each flow (traffic/longflows.py: iperf's --fq-rate sets SO_MAX_PACING_RATE
    # to pacing_cap_bps); False: the kernel's default, a window's segments sent as fast as the access
    # link takes them. Whether bursty arrivals set the many-flow plateau: bench/results/plateau/.
    sender_pacing: bool = False

    @property
    def shaper_burst(self) -> int:
        if self.burst_bytes is not None:
            return self.burst_bytes
        return default_burst_bytes(self.shaper, self.rate_mbps, self.pacer)

    def backend(self) -> str:
        """The delay backend this run uses on this machine (probes the kernel: needs root)."""
        return delay_backend(self.delay_backend, self.shaper)

    def for_backend(self, backend: str) -> DumbbellConfig:
        """This config with the shaper resolved for the delay backend the run uses (netem or delayline)."""
        cfg = replace(self, shaper=resolve_shaper(self.shaper, backend))
        if cfg.shaper == "line":
            if backend != "delayline":
                raise UsageError(
                    "--shaper line is the delay line's own queue, and this run's delay is netem: "
                    "use --delay-backend delayline"
                )
            check_line_buffer(cfg.initial_buffer_bytes(), "--buffer-bytes")
        return cfg

    def validate(self) -> None:
        if not isinstance(self.hosts, int) or not 1 <= self.hosts <= MAX_HOSTS:
            raise UsageError(f"--hosts {self.hosts}: must be a whole number from 1 to {MAX_HOSTS}")
        check_number("--rate-mbps", self.rate_mbps, MIN_RATE_MBPS, MAX_RATE_MBPS, lo_inclusive=True)
        if len(self.rtt_ms) != self.hosts:
            raise UsageError(f"--rtt-ms: {len(self.rtt_ms)} values for {self.hosts} hosts")
        for v in self.rtt_ms:
            check_rtt_ms(v)
        if self.buffer_bytes is not None:
            check_buffer_bytes(self.buffer_bytes, "--buffer-bytes")
        if self.shaper not in SHAPER_CHOICES:
            raise UsageError(f"--shaper {self.shaper}: must be one of {', '.join(SHAPER_CHOICES)}")
        if self.shaper == "line":
            if self.delay_backend == "netem":
                raise UsageError("--shaper line is the delay line's own queue: use --delay-backend delayline")
            check_line_buffer(self.initial_buffer_bytes(), "--buffer-bytes")
        if self.delay_backend not in DELAY_BACKENDS:
            raise UsageError(f"--delay-backend {self.delay_backend}: must be one of {', '.join(DELAY_BACKENDS)}")
        ccs = available_congestion_controls()
        if self.cc not in ccs:
            raise UsageError(f"--cc {self.cc}: this kernel offers {', '.join(ccs) or 'none'}")
        if self.access_mbps != 0:
            check_number("--access-mbps", self.access_mbps, self.rate_mbps, MAX_RATE_MBPS * 10)
        if self.loss_recovery not in LOSS_RECOVERIES:
            raise UsageError(f"--loss-recovery {self.loss_recovery}: must be one of {', '.join(LOSS_RECOVERIES)}")
        if not isinstance(self.delayed_ack, bool):
            raise UsageError(f"--delayed-ack {self.delayed_ack}: must be on or off")
        if not isinstance(self.sender_pacing, bool):
            raise UsageError(f"--sender-pacing {self.sender_pacing}: must be on or off")
        if not isinstance(self.pacer, bool):
            raise UsageError(f"--pacer {self.pacer}: must be on or off")
        # Every default is within these bounds; only a given burst needs checking.
        burst = self.burst_bytes
        if burst is not None and (not isinstance(burst, int) or not FRAME_BYTES <= burst <= 64 * FRAME_BYTES):
            raise UsageError(f"--burst-bytes {burst}: must be between {FRAME_BYTES} and {64 * FRAME_BYTES} bytes")

    def tcp_changes(self) -> list[str]:
        """What this run changed in the hosts' TCP from the kernel's, for titles and progress lines."""
        return tcp_changes(self.loss_recovery, self.delayed_ack, self.sender_pacing)

    @property
    def bdp_bytes(self) -> int:
        """Bandwidth-delay product at the largest RTT, in bytes."""
        return int(self.rate_mbps * 1e6 / 8 * max(self.rtt_ms) / 1000)

    def initial_buffer_bytes(self) -> int:
        if self.buffer_bytes is not None:
            return self.buffer_bytes
        return max(self.bdp_bytes, 10 * FRAME_BYTES)

    def to_dict(self) -> dict:
        return asdict(self)
