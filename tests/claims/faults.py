"""Faults planted in the toolkit for one run, to show that each claim can fail.

Each fault patches the toolkit in the process that runs the command (claims/launch.py), never the
files of the checkout: the same command line, with one part of the emulation, a monitor or the twin
made wrong in a way the claim exists to catch. `make claims-faults` runs every claim under the
faults that must break it and fails unless each comes out broken.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

SLOW = 0.95  # line-slow: the line serves this share of the rate it was given
LATE_MS = 3.0  # delay-late: added to every host's round trip (half each way)
HIGH = 0.03  # twin-high and samples-high: utilization read this much high
STALL_EVERY_S, STALL_S = 2.0, 0.1  # line-stalls: the delay line stopped this long this often


def line_slow() -> None:
    """The line shaper paces at 95 % of the rate it was given (its frame time 5 % long)."""
    from bufsize.topologies.line import LineBottleneck

    args = LineBottleneck.delayline_args

    def slow(self):  # noqa: ANN001, ANN202 - a patched method
        argv = args(self)
        i = argv.index("-R") + 1
        argv[i] = str(int(int(argv[i]) * SLOW))
        return argv

    LineBottleneck.delayline_args = slow


def delay_late() -> None:
    """The delay line holds every frame 1.5 ms longer than its host's delay asks, each way."""
    from bufsize.topologies.delay import DelayLine

    init = DelayLine.__init__

    def late(self, state, ns, side_a, side_b, hosts, *args, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        hosts = [(ip, fwd + LATE_MS / 2, rev + LATE_MS / 2) for ip, fwd, rev in hosts]
        init(self, state, ns, side_a, side_b, hosts, *args, **kw)

    DelayLine.__init__ = late


def queue_monitor_half() -> None:
    """The run's recorder samples the queue at half the rate it should (50 Hz)."""
    from bufsize.monitors.recorder import Recorder

    init = Recorder.__init__

    def half(self, *args, queue_hz: float = 100.0, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        init(self, *args, queue_hz=queue_hz / 2, **kw)

    Recorder.__init__ = half


def buffer_stuck() -> None:
    """A change of the bottleneck's buffer in place does nothing (the limit it was built with stays)."""
    from bufsize.topologies.dumbbell import Dumbbell

    Dumbbell.set_buffer = lambda self, buffer_bytes: None


def twin_high() -> None:
    """The twin's samples read 3 points of utilization high."""
    from bufsize.scaffold.link import SimulatedLink

    take = SimulatedLink.take

    def high(self, *args, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        got = take(self, *args, **kw)
        got.rates_mbps = [r + HIGH * self.cfg.rate_mbps for r in got.rates_mbps]
        return got

    SimulatedLink.take = high


def samples_high() -> None:
    """The search's probes read 3 points of utilization high (its calibration is left alone)."""
    from bufsize.longlived.search import Prober

    measure = Prober.measure

    def high(self, *args, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        got = [u + HIGH for u in measure(self, *args, **kw)]
        self.measurements[-1].utilization = got
        return got

    Prober.measure = high


def line_stalls() -> None:
    """The delay line is stopped for 100 ms every 2 s (SIGSTOP and SIGCONT to our own child, by PID)."""
    from bufsize.topologies.delay import DelayLine

    start = DelayLine.start

    def stalling(self, *args, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        start(self, *args, **kw)
        proc = self.proc

        def loop() -> None:
            while proc.poll() is None:
                time.sleep(STALL_EVERY_S)
                try:
                    os.kill(proc.pid, signal.SIGSTOP)
                    time.sleep(STALL_S)
                finally:
                    if proc.poll() is None:
                        os.kill(proc.pid, signal.SIGCONT)

        threading.Thread(target=loop, daemon=True).start()

    DelayLine.start = stalling


def one_host_cubic() -> None:
    """The last sender host runs cubic whatever congestion control was asked."""
    from bufsize.traffic import longflows

    spawn_of = longflows.LongFlows._start_iperf2

    def mixed(self):  # noqa: ANN001, ANN202
        net = self.net
        spawn = net.spawn
        last = net.hosts[-1].ns

        def spawn_cubic(ns, argv, *args, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
            if ns == last and "-Z" in argv:
                argv = list(argv)
                argv[argv.index("-Z") + 1] = "cubic"
            return spawn(ns, argv, *args, **kw)

        net.spawn = spawn_cubic
        try:
            return spawn_of(self)
        finally:
            del net.spawn

    longflows.LongFlows._start_iperf2 = mixed


def netem_short() -> None:
    """Each netem qdisc of the dumbbell holds frames half as long as asked (for the VM's claims)."""
    from bufsize.topologies import description

    commands = description.netem_commands

    def short(dev: str, one_way_us: int, rate_mbps: float | None) -> list[str]:
        return commands(dev, one_way_us // 2, rate_mbps)

    description.netem_commands = short


def shaper_half() -> None:
    """The switch's shaper (htb or tbf) is built at half the rate asked (for the VM's claims)."""
    from bufsize.topologies import shaper

    build = shaper.build_commands

    def half(dev: str, kind: str, rate_mbps: float, *args, **kw) -> list[str]:  # noqa: ANN002, ANN003
        return build(dev, kind, rate_mbps / 2, *args, **kw)

    shaper.build_commands = half


FAULTS: dict[str, Callable[[], None]] = {
    "line-slow": line_slow,
    "delay-late": delay_late,
    "queue-monitor-half": queue_monitor_half,
    "buffer-stuck": buffer_stuck,
    "twin-high": twin_high,
    "samples-high": samples_high,
    "line-stalls": line_stalls,
    "one-host-cubic": one_host_cubic,
    "netem-short": netem_short,
    "shaper-half": shaper_half,
}


def plant(name: str) -> None:
    if name not in FAULTS:
        raise SystemExit(f"claims: no fault {name!r}; the faults are {', '.join(FAULTS)}")
    FAULTS[name]()
