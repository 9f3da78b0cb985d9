"""Back-to-back utilization samples from a device's transmit counters (what search, measure and verify count)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from bufsize.topologies.counters import InterfaceCounters, rate_mbps


@dataclass(frozen=True)
class RateSamples:
    rates_mbps: list[float]  # one per sample
    sent_bytes: int  # over all samples
    sent_packets: int
    seconds: float

    @property
    def mean_mbps(self) -> float:
        return self.sent_bytes * 8 / self.seconds / 1e6 if self.seconds > 0 else 0.0


def sample_rates(
    counters: InterfaceCounters, n: int, sample_s: float, sleep: Callable[[float], None] = time.sleep
) -> RateSamples:
    """n samples of `sample_s` each, timed from the counters' own monotonic timestamps (no drift).

    `sleep` may check the run's health while it waits (Experiment.sleep), so a fault ends a long
    sample at once instead of being averaged into it."""
    first = prev = counters.read()
    rates = []
    for _ in range(n):
        sleep(max(0.0, prev.t + sample_s - time.monotonic()))
        cur = counters.read()
        rates.append(rate_mbps(prev, cur))
        prev = cur
    return RateSamples(rates, prev.tx_bytes - first.tx_bytes, prev.tx_packets - first.tx_packets, prev.t - first.t)
