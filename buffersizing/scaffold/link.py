"""The link an experiment drives while its long flows run: the emulated dumbbell or the ns-3 twin.

Both are driven through the same verbs (SampledLink): the buffer, set in bytes; waiting on the
link's own clock (wall time, checked for faults, or simulated time); and n back-to-back samples of
the bottleneck, each with its rate, the drops, the packets sent, the queue, the senders' recovery
counters and the drop times that give the loss episodes. An experiment written against these verbs
runs unchanged on either link, so a difference between the two is TCP's or the emulator's, not the
driver's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from bufsize.monitors.cpu import CpuMonitor
from bufsize.monitors.rate import quiet_samples, sample_rates
from bufsize.monitors.recorder import queue_stats, window
from bufsize.monitors.tcpstats import counter_delta, read_counters, twin_counters
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.counters import InterfaceCounters
from bufsize.topologies.delay import timing_between
from bufsize.topologies.dumbbell import Dumbbell
from bufsize.topologies.nssim import SimDumbbell
from bufsize.topologies.qdisc_stats import QdiscSample
from bufsize.traffic.longflows import LongFlows


@dataclass
class Taken:
    """n back-to-back samples of the bottleneck, and what the link saw while they ran."""

    rates_mbps: list[float]  # one per kept sample
    drops: int  # at the bottleneck
    packets_sent: int  # by the bottleneck
    t_start: float  # on the link's clock: wall (epoch) seconds, or simulated seconds
    queue: dict = field(default_factory=dict)  # backlog while sampling; empty where not traced
    tcp: dict = field(default_factory=dict)  # the senders' loss-recovery counters over the samples
    cpu: dict = field(default_factory=dict)  # CPU shares (the emulation only)
    delay_line: dict = field(default_factory=dict)  # the delay line's own timekeeping (the line only)
    steal: list[float] = field(default_factory=list)  # the hypervisor's share during each kept sample
    set_aside: list[tuple[float, float]] = field(default_factory=list)  # (rate, steal) of samples retaken
    # (times, cumulative drops) traces from which the loss episodes are counted, one per stretch.
    drop_traces: list[tuple[list[float], list[int]]] = field(default_factory=list)
    window: tuple[float, float] | None = None  # monotonic start and end (the emulation's recorder's clock)
    # Bytes the bottleneck sent over the whole span, and the span's length on the link's clock: the
    # mean rate over it is these two, whatever the samples' own lengths were.
    sent_bytes: int = 0
    seconds: float = 0.0

    @property
    def mean_mbps(self) -> float:
        return self.sent_bytes * 8 / self.seconds / 1e6 if self.seconds > 0 else 0.0


class LinkSpec(Protocol):
    """What is asked of a link's configuration: the emulated DumbbellConfig and the twin's SimConfig."""

    cc: str
    rate_mbps: float
    rtt_ms: list[float]

    @property
    def bdp_bytes(self) -> int: ...

    def to_dict(self) -> dict: ...


class SampledLink(Protocol):
    """The verbs an experiment uses on a link whose flows are running."""

    cfg: LinkSpec
    # How often a calibration that reads far below the nominal rate is tried again: a busy machine can
    # recover, a simulation gives the same figure each time.
    calibration_attempts: int
    calibration_shortfall: str  # why the reference can fall short on this link, for the refusal

    @property
    def buffer_bytes(self) -> int: ...

    def set_buffer_bytes(self, buffer_bytes: int) -> None: ...

    def wait(self, seconds: float) -> None: ...

    def take(self, n: int, sample_s: float, max_steal: float = 0.0, max_retakes: int = 0) -> Taken: ...

    def probe_note(self, measured: Any) -> str:
        """What a probe's progress line adds for this link (', hypervisor steal 1.2%') about one
        measurement (anything with its `cpu` and `delay_line`), or ''."""
        ...

    def clock_text(self) -> str:
        """How far the run has gone, on the link's clock, for progress lines."""
        ...

    def close(self) -> None:
        """Let go of what sampling holds (the emulation's counter readers); the run ends the link."""
        ...


class EmulatedLink:
    """The emulated dumbbell with its running long flows. `sleep` waits while checking the run's health
    (Experiment.sleep); `queue_trace` gives the recorder's backlog samples so far (None: no recorder)."""

    calibration_attempts = 3
    calibration_shortfall = (
        "the machine cannot emulate this configuration faithfully; try a lower --rate-mbps, fewer flows, or check"
        " `bufsize doctor` and the CPU load"
    )

    def __init__(
        self,
        net: Dumbbell,
        flows: LongFlows,
        sleep: Callable[[float], None] = time.sleep,
        queue_trace: Callable[[], Sequence[QdiscSample]] | None = None,
        note: Callable[[Any], str] = lambda _: "",  # probe_note's text, from the experiment's own checks
        t_wall: float | None = None,
    ) -> None:
        self.net, self.flows, self.sleep, self.queue_trace, self.note = net, flows, sleep, queue_trace, note
        self.cfg = net.cfg
        self.counters: InterfaceCounters = net.bottleneck.counters()
        self.t_wall = time.monotonic() if t_wall is None else t_wall  # the run's start, for progress lines

    @property
    def buffer_bytes(self) -> int:
        return self.net.buffer_bytes

    def set_buffer_bytes(self, buffer_bytes: int) -> None:
        self.net.set_buffer(buffer_bytes)

    def wait(self, seconds: float) -> None:
        self.sleep(seconds)

    def take(self, n: int, sample_s: float, max_steal: float = 0.0, max_retakes: int = 0) -> Taken:
        t0 = time.time()
        cpu = CpuMonitor().start()
        drops0 = self.net.bottleneck.leaf_drops()
        senders = [h.ns for h in self.net.hosts]
        tcp0 = read_counters(senders)
        c0 = self.counters.read()
        dl = self.net.delayline
        dl0 = dl.stats() if dl else {}
        t_mono = time.monotonic()
        got = quiet_samples(lambda k: sample_rates(self.counters, k, sample_s, self.sleep), n, max_steal, max_retakes)
        span = (t_mono, time.monotonic())
        c1 = self.counters.read()
        drops = self.net.bottleneck.leaf_drops() - drops0
        tcp = counter_delta(tcp0, read_counters(senders))
        share = cpu.stop()
        kept_time = timing_between(dl0, dl.stats()) if dl else None
        self.net.check_alive()
        self.flows.check()
        traces, queue = [], {}
        if self.queue_trace is not None:
            sel = window(self.queue_trace(), *span)
            traces = [([q.t for q in sel], [q.drops for q in sel])]
            queue = queue_stats(sel)
        return Taken(
            got.rates_mbps,
            drops,
            c1.tx_packets - c0.tx_packets,
            t0,
            queue=queue,
            tcp=tcp,
            cpu=share.to_dict(),
            delay_line=kept_time or {},
            steal=list(got.steal),
            set_aside=list(got.set_aside),
            drop_traces=traces,
            window=span,
            sent_bytes=c1.tx_bytes - c0.tx_bytes,
            seconds=c1.t - c0.t,
        )

    def probe_note(self, measured: Any) -> str:
        return self.note(measured)

    def clock_text(self) -> str:
        return f"{time.monotonic() - self.t_wall:.0f} s"

    def close(self) -> None:
        self.counters.close()


class SimulatedLink:
    """The ns-3 twin with its running long flows: time advances only when asked, and a sample is
    simulated, not waited for."""

    calibration_attempts = 1
    calibration_shortfall = "the flows cannot fill the simulated link (too many for the pipe?)"

    def __init__(self, net: SimDumbbell) -> None:
        self.net = net
        self.cfg = net.cfg

    @property
    def buffer_bytes(self) -> int:
        return self.net.buffer_bytes

    def set_buffer_bytes(self, buffer_bytes: int) -> None:
        self.net.set_buffer(buffer_bytes // FRAME_BYTES)

    def wait(self, seconds: float) -> None:
        self.net.run(seconds)

    def take(self, n: int, sample_s: float, max_steal: float = 0.0, max_retakes: int = 0) -> Taken:
        t0 = self.net.sim_seconds
        ivs = [self.net.run(sample_s) for _ in range(n)]
        span = sum(iv.t1 - iv.t0 for iv in ivs)
        return Taken(
            [iv.rate_mbps for iv in ivs],
            sum(iv.drops for iv in ivs),
            sum(iv.packets for iv in ivs),
            t0,
            queue={
                "mean_packets": round(sum(iv.queue_mean * (iv.t1 - iv.t0) for iv in ivs) / span, 2),
                "max_packets": max(iv.queue_max for iv in ivs),
                "drops": sum(iv.drops for iv in ivs),
            },
            tcp=twin_counters([iv.tcp for iv in ivs]) if all(iv.tcp for iv in ivs) else {},
            drop_traces=[
                ([iv.t0, *iv.drop_times, iv.t1], [0, *range(1, len(iv.drop_times) + 1), len(iv.drop_times)])
                for iv in ivs
            ],
            sent_bytes=sum(iv.bytes for iv in ivs),
            seconds=span,
        )

    def probe_note(self, measured: Any) -> str:
        return ""

    def clock_text(self) -> str:
        return f"{self.net.sim_seconds:.0f} s simulated"

    def close(self) -> None:
        pass  # the run closes the simulator
