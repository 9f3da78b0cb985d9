"""Machine-wide CPU use over a span, from /proc/stat via psutil (no sampling thread)."""

from __future__ import annotations

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
