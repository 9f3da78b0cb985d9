"""The simulator twin's dumbbell: one bsz-nssim process (topologies/nssim/nssim.cc, ns-3) per run.

The emulated dumbbell changes its bottleneck buffer in place while the flows run and is read from
interface counters; the twin offers the same two operations on simulated time (set_buffer, run),
so a search on top of it is the emulation's search with simulated seconds instead of wall seconds.
The process is ours alone: started with an argument list, spoken to on its stdin and stdout, and
ended by its own PID (closing its stdin ends it; a kill only if it does not).
"""

from __future__ import annotations

import json
import re
import subprocess
import sysconfig
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.errors import MachineError, RunError, UsageError

HELPER = Path(__file__).resolve().parent / "nssim" / "bsz-nssim"
SIM_CCS = ("reno", "cubic", "bbr")  # ns-3's TcpLinuxReno, TcpCubic, TcpBbr
# linux: RTO = srtt + max(4 rttvar, 200 ms); ns2: ns-2's defaults since 2004, max(1 s, srtt + 4 rttvar)
# on a 10 ms tick, to ask what a seed's ns-2 simulation would have seen.
SIM_RTOS = ("linux", "ns2")
# The wheel setup.sh installs (its headers and libraries build the helper); pinned so that a result
# names the simulator it came from and the twin answers the same way on every machine.
NS3_WHEEL = "ns3==3.44.post0"
MAX_SIM_FLOWS = 100_000
MAX_SIM_HOSTS = 10_000
# A value is a word, or a type name such as ns3::TcpClassicRecovery (the RecoveryType attribute's).
ATTRIBUTE = re.compile(r"ns3::[A-Za-z][A-Za-z0-9]*::[A-Za-z][A-Za-z0-9]*=[A-Za-z0-9_.+-]+(?:::[A-Za-z0-9_.+-]+)*")


def ns3_dir() -> Path:
    """Where the ns3 wheel's headers and libraries are (in this Python's site-packages)."""
    return Path(sysconfig.get_paths()["purelib"]) / "ns3"


def ns3_version() -> str | None:
    """The ns-3 release the helper links against (from its core library's name), None if absent."""
    for lib in sorted((ns3_dir() / "lib64").glob("libns3.*-core.so")):
        m = re.fullmatch(r"libns3\.([0-9]+)-core\.so", lib.name)
        if m:
            return f"3.{m.group(1)}"  # ns-3 names its libraries after the minor release (3.44 -> ns3.44)
    return None


def twin_ready() -> bool:
    return HELPER.exists() and ns3_version() is not None


def twin_status() -> str:
    """For `bufsize doctor`: whether `bufsize sim` can run here, and if not what to do."""
    version = ns3_version()
    if version is None:
        return f"not installed (./setup.sh installs the {NS3_WHEEL} wheel and builds the twin)"
    if not HELPER.exists():
        return f"ns-3 {version} present, {HELPER.name} not built (run ./setup.sh)"
    return f"ns-3 {version}, {HELPER.name} built"


@dataclass(frozen=True)
class SimConfig:
    """A simulated dumbbell: the emulated one's fields that mean something in the simulator."""

    hosts: int
    rate_mbps: float
    rtt_ms: list[float]
    cc: str = "reno"
    access_mbps: float = 1000.0
    seed: int = 1
    iw: int = 10  # initial window, packets (Linux's; the seeds' ns-2 simulations mostly used 1 or 2)
    rto: str = "linux"
    delayed_ack: bool = True  # an ACK per two segments or 40 ms (False: every segment ACKed at once)
    # Every flow paced by its TCP, capped at the access rate (the emulation's --sender-pacing on).
    sender_pacing: bool = False
    # The long flows start at uniformly random times over this many simulated seconds (1 s in every
    # twin result made before the option). The emulation holds every flow's first byte to one common
    # time, so a spread of about an RTT is nearer it; at 10 Gb/s it also keeps the first flows from
    # growing windows of thousands of packets alone, which ns-3 recovers in W^2 (docs/twin.md).
    start_spread_s: float = 1.0
    # ns-3 attribute defaults, NAME=VALUE, set over the Linux-like ones (ns3::TcpCubic::HyStart=false):
    # to turn one part of a congestion control off, or match it to Linux's, and see what it moves.
    attributes: tuple[str, ...] = ()

    @property
    def bdp_bytes(self) -> int:
        """Bandwidth-delay product at the largest RTT, in bytes (as DumbbellConfig.bdp_bytes)."""
        return int(self.rate_mbps * 1e6 / 8 * max(self.rtt_ms) / 1000)

    def validate(self, flows: int, short_flows: bool = False) -> None:
        """`short_flows`: transfers are added on top (add_transfer, add_user), so no long flow is needed."""
        if not (0 if short_flows else 1) <= flows <= MAX_SIM_FLOWS:
            raise UsageError(f"--flows {flows}: the twin takes {0 if short_flows else 1} to {MAX_SIM_FLOWS}")
        if not 1 <= self.hosts <= MAX_SIM_HOSTS:
            raise UsageError(f"--hosts {self.hosts}: the twin takes 1 to {MAX_SIM_HOSTS}")
        if flows and self.hosts > flows:
            raise UsageError(f"--hosts {self.hosts} is more than --flows {flows}: a host without a flow")
        if not 0.1 <= self.rate_mbps <= 100_000:
            raise UsageError(f"--rate-mbps {self.rate_mbps:g}: the twin takes 0.1 to 100000")
        if len(self.rtt_ms) != self.hosts or not all(0 <= r <= 10_000 for r in self.rtt_ms):
            raise UsageError("--rtt-ms: one RTT from 0 to 10000 ms per host")
        if self.cc not in SIM_CCS:
            raise UsageError(f"--cc {self.cc}: the twin has {', '.join(SIM_CCS)}")
        if not self.rate_mbps <= self.access_mbps <= 1_000_000:
            raise UsageError(
                f"--access-mbps {self.access_mbps:g}: at least the bottleneck rate, at most 1000000 (no unshaped links)"
            )
        if not 1 <= self.seed <= 2**31:
            raise UsageError(f"--seed {self.seed}: a whole number from 1 to {2**31}")
        if not 1 <= self.iw <= 1000:
            raise UsageError(f"--iw {self.iw}: an initial window from 1 to 1000 packets")
        if not isinstance(self.delayed_ack, bool):
            raise UsageError(f"--delayed-ack {self.delayed_ack}: must be on or off")
        if not isinstance(self.sender_pacing, bool):
            raise UsageError(f"--sender-pacing {self.sender_pacing}: must be on or off")
        if self.rto not in SIM_RTOS:
            raise UsageError(f"--rto {self.rto}: one of {', '.join(SIM_RTOS)}")
        if not 0 <= self.start_spread_s <= 100:
            raise UsageError(f"--start-spread-s {self.start_spread_s:g}: from 0 to 100 simulated seconds")
        for a in self.attributes:
            if not ATTRIBUTE.fullmatch(a):
                raise UsageError(
                    f"--ns3-attribute {a!r}: ns3::TYPE::NAME=VALUE, the value letters, digits and ._+- or a type "
                    "name (ns3::TYPE)"
                )

    def to_dict(self) -> dict:
        """The fields, with `attributes` only where some were given, so a config that sets none is
        recorded as one without the field, and records that lack it still compare equal (util-table's
        resume compares them)."""
        d = asdict(self)
        attributes = d.pop("attributes")
        return d | ({"attributes": list(attributes)} if attributes else {})


@dataclass
class Interval:
    """What the bottleneck did over one `run` of simulated time."""

    t0: float
    t1: float
    bytes: int  # Ethernet frame bytes sent by the bottleneck (the emulation's interface counter)
    packets: int
    drops: int
    flows_up: int
    queue_mean: float
    queue_max: int
    drop_times: list[float] = field(default_factory=list)  # each millisecond that saw a drop
    # The long flows' loss recovery over the interval (out_segs, retrans_segs, timeouts, recoveries).
    tcp: dict[str, int] = field(default_factory=dict)

    @property
    def rate_mbps(self) -> float:
        return self.bytes * 8 / (self.t1 - self.t0) / 1e6


class SimDumbbell:
    """with SimDumbbell(cfg, flows, buffer_packets) as net: net.run(5.0); net.set_buffer(40)"""

    def __init__(self, cfg: SimConfig, flows: int, buffer_packets: int, short_flows: bool = False) -> None:
        cfg.validate(flows, short_flows)
        if not twin_ready():
            raise MachineError(f"the simulator twin is not available: {twin_status()}")
        self.cfg, self.flows = cfg, flows
        self.buffer_packets = buffer_packets
        self.proc: subprocess.Popen[str] | None = None
        self.sim_seconds = 0.0

    def args(self) -> list[str]:
        c = self.cfg
        return [str(HELPER), "--flows", str(self.flows), "--hosts", str(c.hosts), "--rate-mbps", repr(c.rate_mbps),
                "--rtt-ms", ",".join(repr(float(r)) for r in c.rtt_ms), "--cc", c.cc,
                "--access-mbps", repr(c.access_mbps), "--buffer-packets", str(self.buffer_packets),
                "--seed", str(c.seed), "--iw", str(c.iw), "--rto", c.rto,
                "--delack", "2" if c.delayed_ack else "1", "--pacing", "1" if c.sender_pacing else "0",
                "--start-spread-s", repr(float(c.start_spread_s)),
                *(x for a in c.attributes for x in ("--attribute", a))]  # fmt: skip

    def __enter__(self) -> SimDumbbell:
        self.proc = subprocess.Popen(
            self.args(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self._read()  # {"ready": true}
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        p, self.proc = self.proc, None
        if p is None:
            return
        try:
            if p.poll() is None and p.stdin:
                p.stdin.write("quit\n")
                p.stdin.flush()
        except OSError:
            pass  # it has gone already
        try:
            p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()  # our own child, by its PID
            p.communicate()

    def _send(self, line: str) -> dict:
        if self.proc is None or self.proc.stdin is None:
            raise RunError("the simulator is not running")
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except OSError as e:
            raise RunError(f"the simulator stopped: {self._stderr()}") from e
        return self._read()

    def _read(self) -> dict:
        assert self.proc is not None and self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RunError(f"the simulator stopped: {self._stderr()}")
        reply = json.loads(line)
        if "error" in reply:
            raise RunError(f"the simulator refused a command: {reply['error']}")
        return reply

    def _stderr(self) -> str:
        assert self.proc is not None
        try:
            _, err = self.proc.communicate(timeout=5)
        except (subprocess.TimeoutExpired, ValueError, OSError):
            err = ""
        return " ".join((err or "").split())[-400:] or f"exit status {self.proc.returncode}"

    def set_buffer(self, packets: int) -> None:
        self._send(f"buffer {int(packets)}")
        self.buffer_packets = int(packets)

    @property
    def buffer_bytes(self) -> int:
        return self.buffer_packets * FRAME_BYTES

    def run(self, seconds: float) -> Interval:
        if not seconds > 0:
            raise UsageError(f"a simulated interval must be longer than 0 s, not {seconds:g}")
        r = self._send(f"run {seconds!r}")
        self.sim_seconds = r["t1"]
        return Interval(**r)

    def arrivals(self, seconds: float) -> list[float]:
        """Advance `seconds`; the simulated time of every packet offered to the bottleneck's FIFO
        (queued or dropped): the arrival process the emulation traces on the switch's port."""
        if not 0 < seconds <= 60:
            raise UsageError(f"arrivals are traced for 0 to 60 simulated seconds, not {seconds:g}")
        r = self._send(f"arrivals {seconds!r}")
        self.sim_seconds = r["t1"]
        return [float(t) for t in r["arrivals"]]

    def flows_up(self) -> int:
        return int(self._send("status")["flows_up"])

    # ---- short transfers (flows of a given size; nssim.cc's transfer, user and transfers) ----------

    def add_transfer(self, at_s: float, host: int, size_bytes: int) -> None:
        """An open-loop transfer: at simulated time at_s, `host` sends size_bytes on a new connection."""
        self._send(f"transfer {at_s!r} {int(host)} {int(size_bytes)}")

    def add_user(self, host: int, until_s: float, cycles: list[tuple[float, int]]) -> None:
        """A closed-loop user: (think seconds, bytes) in turn, each transfer after the previous one
        completes; none starts after simulated time until_s."""
        pairs = " ".join(f"{think!r} {int(size)}" for think, size in cycles)
        self._send(f"user {int(host)} {until_s!r} {pairs}")

    def transfers(self) -> list[SimTransfer]:
        """Every transfer started so far, in the order they started."""
        return [
            SimTransfer(int(h), int(b), s, None if d < 0 else d) for h, b, s, d in self._send("transfers")["transfers"]
        ]


@dataclass(frozen=True)
class SimTransfer:
    host: int
    size_bytes: int
    start: float  # simulated seconds
    done: float | None  # when the receiver had every byte; None: not by the last `run`

    @property
    def fct_s(self) -> float | None:
        return None if self.done is None else self.done - self.start
