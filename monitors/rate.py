"""Back-to-back utilization samples from a device's transmit counters (what search, measure and verify count)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from bufsize.monitors.cpu import share_between
from bufsize.topologies.counters import InterfaceCounters, rate_mbps


@dataclass(frozen=True)
class RateSamples:
    rates_mbps: list[float]  # one per sample
    sent_bytes: int  # over all samples
    sent_packets: int
    seconds: float
    # Per sample, the share of all CPU time the hypervisor took (steal, /proc/stat) while it ran.
    steal: list[float] = field(default_factory=list)

    @property
    def mean_mbps(self) -> float:
        return self.sent_bytes * 8 / self.seconds / 1e6 if self.seconds > 0 else 0.0


def sample_rates(
    counters: InterfaceCounters,
    n: int,
    sample_s: float,
    sleep: Callable[[float], None] = time.sleep,
    cpu_times: Callable[[], object] = psutil.cpu_times,
) -> RateSamples:
    """n samples of `sample_s` each, timed from the counters' own monotonic timestamps (no drift),
    each with the hypervisor's steal over it (`cpu_times`: psutil's, replaceable in tests).

    `sleep` may check the run's health while it waits (Experiment.sleep), so a fault ends a long
    sample at once instead of being averaged into it."""
    first = prev = counters.read()
    cpu_prev = cpu_times()
    rates, steal = [], []
    for _ in range(n):
        sleep(max(0.0, prev.t + sample_s - time.monotonic()))
        cur = counters.read()
        cpu_cur = cpu_times()
        rates.append(rate_mbps(prev, cur))
        steal.append(share_between(cpu_prev, cpu_cur).steal)
        prev, cpu_prev = cur, cpu_cur
    sent_bytes, sent_packets = prev.tx_bytes - first.tx_bytes, prev.tx_packets - first.tx_packets
    return RateSamples(rates, sent_bytes, sent_packets, prev.t - first.t, steal)


@dataclass(frozen=True)
class QuietSamples:
    """The samples a measurement keeps, and those it set aside because the hypervisor took CPU."""

    rates_mbps: list[float]  # kept, in the order taken
    steal: list[float]  # of each kept sample
    set_aside: list[tuple[float, float]] = field(default_factory=list)  # (rate Mb/s, steal), in order taken


def quiet_samples(take: Callable[[int], RateSamples], n: int, max_steal: float, max_retakes: int) -> QuietSamples:
    """n samples from `take`, retaking (up to `max_retakes` more in all) each one during which the
    hypervisor took more than `max_steal` of all CPU time; where the retakes run out, the least-stolen
    of the rest fill the n, in the order taken. `max_steal` 0 keeps the first n, as taken.

    Why: on the development VM, fifteen one-minute measures at the committed N = 100 cubic answer
    carried 81-99 % of the link, while their 2 s windows with at most 0.5 % steal carried 97-99 % in
    every run (bench/quiet_windows.py, docs/findings.md): the machine, not the buffer, moved the answers."""
    got = take(n)
    taken = list(zip(got.rates_mbps, got.steal or [0.0] * len(got.rates_mbps), strict=True))
    if max_steal <= 0:
        return QuietSamples([r for r, _ in taken], [s for _, s in taken])
    retaken = 0
    while (quiet := sum(1 for _, s in taken if s <= max_steal)) < n and retaken < max_retakes:
        more = min(n - quiet, max_retakes - retaken)
        again = take(more)
        taken += zip(again.rates_mbps, again.steal or [0.0] * len(again.rates_mbps), strict=True)
        retaken += more

    def rank(i: int) -> tuple[bool, float, int]:  # quiet ones first as taken, then the least stolen
        stolen = taken[i][1] > max_steal
        return stolen, taken[i][1] if stolen else 0.0, i

    keep = set(sorted(range(len(taken)), key=rank)[:n])
    aside = [t for i, t in enumerate(taken) if i not in keep]
    keep_order = sorted(keep)
    return QuietSamples([taken[i][0] for i in keep_order], [taken[i][1] for i in keep_order], aside)
