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
# Past this mean share of all CPU time taken by the hypervisor (steal, from /proc/stat) a search's
# progress line names a probe's steal, and a result carries a caution (bufsize.scaffold.cautions): one limit
# for both, so what a user watches and what the result says agree. Answers on a 2-vCPU VM moved by
# more than half with a few percent of the CPU stolen, and a link that carried 99 % carried 95-96 %
# at under 2 % steal: steal is a marker that answers may have moved, not a cause or a bound
# (the measurements: docs/lab/constants.md#steal_limit).
STEAL_LIMIT = 0.01
# A search sample during which the hypervisor took more than this share of all CPU time is retaken
# (monitors/rate.quiet_samples): past this share a sample reads low by more than the search's
# margin (docs/lab/constants.md#sample_steal_limit).
SAMPLE_STEAL_LIMIT = 0.005


# Past this share of all cores' time taken by processes outside the run (not the run's process or its
# descendants, not kernel threads), a result is cautioned. The idle share cannot tell the run's own
# load (hundreds of flows keep a small machine busy) from another program's; this can. The limit lies
# below the loads under which answers moved (docs/lab/constants.md#foreign_limit).
FOREIGN_LIMIT = 0.05


def steal_note(cpu: dict) -> str:
    """', hypervisor steal 5.1%' for a measurement's CPU shares (CpuShare.to_dict) past STEAL_LIMIT."""
    steal = cpu.get("steal", 0.0)
    return f", hypervisor steal {steal:.1%}" if steal > STEAL_LIMIT else ""


@dataclass(frozen=True)
class CpuShare:
    busy: float
    softirq: float
    idle: float
    # Time the hypervisor gave this VM's vCPUs to others (part of busy): the emulation's timers and
    # softirqs wait through it.
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


class ForeignCpu:
    """The CPU time processes outside the run took between its construction and `result()`, as a
    share of all cores' time, and the processes that took most.

    Outside the run: not this process or a descendant of it (the run's helpers, iperf, its delay
    line) and not a kernel thread (the kernel's network work is the run's). A process that ended
    before `result()` is not counted (its last reading is gone with it). Two passes over
    /proc, one at each end (tens of milliseconds with hundreds of processes), none in between."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.before = others(family())

    def result(self) -> dict:
        wall = time.monotonic() - self.t0
        after = others(family())
        took: dict[int, tuple[str, float]] = {}
        for pid, (name, start, cpu_s) in after.items():
            then = self.before.get(pid)
            took[pid] = (name, cpu_s - then[2] if then is not None and then[1] == start else cpu_s)
        total = sum(c for _, c in took.values())
        top = sorted(((c, n, pid) for pid, (n, c) in took.items() if c > 0), reverse=True)[:3]
        cores = psutil.cpu_count() or 1
        return {
            "share": round(total / (wall * cores), 4) if wall > 0 else None,
            "top": [{"name": n, "pid": pid, "cpu_s": round(c, 2)} for c, n, pid in top],
        }


def family() -> set[int]:
    me = psutil.Process()
    return {me.pid, *(c.pid for c in me.children(recursive=True))}


def others(skip: set[int]) -> dict[int, tuple[str, float, float]]:
    """(name, start time, user + system seconds) of every process outside `skip` that is not a kernel thread."""
    found = {}
    for p in psutil.process_iter(["name", "ppid", "create_time", "cpu_times"]):
        info = p.info
        if p.pid in skip or p.pid == KTHREADD or info["ppid"] == KTHREADD or info["cpu_times"] is None:
            continue
        found[p.pid] = (info["name"] or "?", info["create_time"], info["cpu_times"].user + info["cpu_times"].system)
    return found


KTHREADD = 2  # the kernel threads' parent


# The load steal_under_wakeups puts on each core for argv[1] seconds: WAKE_BUSY_S busy, then a
# WAKE_SLEEP_S sleep, about WAKES_PER_S wake-ups a second, as an emulation's timers make. The
# hypervisor's steal comes with vCPU wake-ups (each waits to be scheduled again), so a probe that
# never sleeps sees a fraction of it (docs/lab/constants.md#steal_under_wakeups).
WAKE_BUSY_S, WAKE_SLEEP_S = 0.0003, 0.0002
WAKES_PER_S = round(1 / (WAKE_BUSY_S + WAKE_SLEEP_S))
WAKE_LOAD = (
    "import sys, time\n"
    "end = time.monotonic() + float(sys.argv[1])\n"
    "while time.monotonic() < end:\n"
    f"    busy = time.monotonic() + {WAKE_BUSY_S}\n"
    "    while time.monotonic() < busy: pass\n"
    f"    time.sleep({WAKE_SLEEP_S})\n"
)


def steal_under_wakeups(seconds: float = 2.0) -> CpuShare:
    """The CPU shares while a load of ours that wakes every core about WAKES_PER_S times a second runs for
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
