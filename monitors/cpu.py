"""Machine-wide CPU use over a span, from /proc/stat via psutil (no sampling thread)."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass

import psutil

from bufsize.monitors.base import Monitor

# Below this idle share of all cores, timers and softirqs of the emulation may run late: flag the run.
MIN_IDLE = 0.10
# From this share of all cores' time stolen by the hypervisor came the probes at N >= 200 that read
# lowest on this 2-core VM (a correlation; taking CPU ourselves did not reproduce it:
# bench/results/steal-episodes.md): the search's progress line names it, so a user sees it.
NOTE_STEAL = 0.02


def steal_note(cpu: dict) -> str:
    """', hypervisor steal 5.1%' for a measurement's CPU shares (CpuShare.to_dict) past NOTE_STEAL."""
    steal = cpu.get("steal", 0.0)
    return f", hypervisor steal {steal:.1%}" if steal >= NOTE_STEAL else ""


@dataclass(frozen=True)
class CpuShare:
    busy: float
    softirq: float
    idle: float
    # Time the hypervisor gave this VM's vCPUs to others (part of busy): the emulation's timers and
    # softirqs wait through it. Recorded since 2026-11-28, when the many-flow answers moved by day.
    steal: float = 0.0

    @property
    def trusted(self) -> bool:
        return self.idle >= MIN_IDLE

    def to_dict(self) -> dict:
        return {"busy": round(self.busy, 3), "softirq": round(self.softirq, 3), "idle": round(self.idle, 3),
                "steal": round(self.steal, 3)}  # fmt: skip


def share_between(t0, t1) -> CpuShare:  # noqa: ANN001 - psutil's scputimes
    d = {f: getattr(t1, f) - getattr(t0, f) for f in t1._fields}
    total = sum(d.values()) or 1.0
    idle = (d["idle"] + d.get("iowait", 0.0)) / total
    return CpuShare(1 - idle, d.get("softirq", 0.0) / total, idle, d.get("steal", 0.0) / total)


class CpuMonitor(Monitor[CpuShare]):
    """Shares of all cores' time between start() and stop()."""

    def _begin(self) -> None:
        self.t0 = psutil.cpu_times()

    def _end(self) -> CpuShare:
        return share_between(self.t0, psutil.cpu_times())


# The load steal_under_wakeups puts on each core for argv[1] seconds: 0.3 ms busy, then a 0.2 ms
# sleep, about 2000 wake-ups a second, as an emulation's timers make. On the development VM at one
# minute of 2026-11-29, busy loops alone saw 0.5-1.3 % of the CPU stolen and this pattern 8-11 %:
# the hypervisor's steal comes with vCPU wake-ups (each waits to be scheduled again), so a probe that
# never sleeps misses it.
WAKE_LOAD = (
    "import sys, time\n"
    "end = time.monotonic() + float(sys.argv[1])\n"
    "while time.monotonic() < end:\n"
    "    busy = time.monotonic() + 0.0003\n"
    "    while time.monotonic() < busy: pass\n"
    "    time.sleep(0.0002)\n"
)


def steal_under_wakeups(seconds: float = 2.0) -> CpuShare:
    """The CPU shares while a load of ours that wakes every core about 2000 times a second runs for
    `seconds` (WAKE_LOAD): a hypervisor takes CPU only from vCPUs that want it, so an idle machine
    shows no steal whatever its neighbours do. The loads are our own processes, ended by PID."""
    procs: list[subprocess.Popen] = []
    try:
        for _ in range(psutil.cpu_count() or 1):
            procs.append(subprocess.Popen([sys.executable, "-c", WAKE_LOAD, str(seconds + 0.5)]))
        time.sleep(0.25)  # past the interpreters' start
        t0 = psutil.cpu_times()
        time.sleep(seconds)
        return share_between(t0, psutil.cpu_times())
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def steal_since_boot() -> float:
    """The share of this machine's busy CPU time (idle and I/O wait left out) the hypervisor took
    since boot: the long view beside steal_under_wakeups' two seconds."""
    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0)
    busy = sum(t) - idle
    return getattr(t, "steal", 0.0) / busy if busy > 0 else 0.0
