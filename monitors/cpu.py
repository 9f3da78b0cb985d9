"""Machine-wide CPU use between two moments, from /proc/stat via psutil (no sampling thread)."""

from __future__ import annotations

from dataclasses import dataclass

import psutil

# Below this idle share of all cores, timers and softirqs of the emulation may run late: flag the run.
MIN_IDLE = 0.10


@dataclass(frozen=True)
class CpuShare:
    busy: float
    softirq: float
    idle: float

    @property
    def trusted(self) -> bool:
        return self.idle >= MIN_IDLE

    def to_dict(self) -> dict:
        return {"busy": round(self.busy, 3), "softirq": round(self.softirq, 3), "idle": round(self.idle, 3)}


class CpuMeter:
    def __init__(self) -> None:
        self.t0 = psutil.cpu_times()

    def share(self) -> CpuShare:
        """Shares of all cores' time since the meter was made (or last reset)."""
        t1 = psutil.cpu_times()
        d = {f: getattr(t1, f) - getattr(self.t0, f) for f in t1._fields}
        total = sum(d.values()) or 1.0
        idle = (d["idle"] + d.get("iowait", 0.0)) / total
        return CpuShare(1 - idle, d.get("softirq", 0.0) / total, idle)

    def reset(self) -> None:
        self.t0 = psutil.cpu_times()
