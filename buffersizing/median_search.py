"""Median-filtered binary search for the smallest buffer that keeps the link at the target utilization.

The search runs over whole packets (1 to `hi_packets`) in log space, because answers span from one
packet to a bandwidth-delay product. Each probe asks `measure(buffer_bytes, n)` for n utilization
samples and decides on their median, so one outlier sample cannot flip a decision. A probe whose
median lies within `margin` of the target is extended with more samples before deciding. When the
bracket closes, its two ends are probed again; if either disagrees with its first verdict the search
resumes from the corrected bracket. The lower end starts at 0 packets (a link with no buffer is
taken to fail), so 1 packet is a possible answer: the 2012 search's false floor of 2 cannot occur.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from topologies import FRAME_BYTES

Measure = Callable[[int, int], list[float]]


@dataclass
class Probe:
    buffer_packets: int
    samples: list[float]
    median: float
    passed: bool
    extended: bool
    recheck: bool
    t: float


@dataclass
class SearchResult:
    buffer_packets: int
    buffer_bytes: int
    target: float
    probes: list[Probe] = field(default_factory=list)
    converged: bool = True
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class MedianSearch:
    measure: Measure
    target: float
    hi_packets: int
    samples: int = 5
    margin: float = 0.003  # a median this close to the target gets more samples
    extra_samples: int = 10
    rechecks: int = 2
    first_guess_packets: int | None = None  # e.g. RTT*C/sqrt(N), probed first if given
    # The calibration buffer defines the reference rate, so when hi is that buffer it passes by definition.
    assume_hi_passes: bool = False
    # Stop when hi - lo <= max(1, resolution * hi): buffers closer than that are within the
    # run-to-run noise of a real link, and each probe costs tens of seconds.
    resolution: float = 0.0
    progress: Callable[[Probe], None] | None = None
    probes: list[Probe] = field(default_factory=list)

    def probe(self, packets: int, recheck: bool = False) -> bool:
        values = list(self.measure(packets * FRAME_BYTES, self.samples))
        if not values:
            raise ValueError(f"no utilization samples at {packets} packets")
        med = statistics.median(values)
        extended = False
        if abs(med - self.target) < self.margin and self.extra_samples > 0:
            values += list(self.measure(packets * FRAME_BYTES, self.extra_samples))
            med = statistics.median(values)
            extended = True
        p = Probe(packets, values, med, med >= self.target, extended, recheck, time.time())
        self.probes.append(p)
        if self.progress:
            self.progress(p)
        return p.passed

    def _bisect(self, lo: int, hi: int) -> tuple[int, int]:
        """lo fails (or is 0), hi passes; narrow to adjacent packets."""
        while hi - lo > max(1, math.floor(self.resolution * hi)):
            mid = max(lo + 1, min(hi - 1, round(math.sqrt(lo * hi)) if lo > 0 else (lo + hi) // 2))
            if self.probe(mid):
                hi = mid
            else:
                lo = mid
        return lo, hi

    def run(self) -> SearchResult:
        if self.hi_packets < 1:
            raise ValueError("hi_packets must be at least 1")
        hi = self.hi_packets
        if not self.assume_hi_passes and not self.probe(hi):
            return SearchResult(
                hi,
                hi * FRAME_BYTES,
                self.target,
                self.probes,
                converged=False,
                note=f"even {hi} packets missed the target; the answer is above the search range",
            )
        lo = 0
        guess = self.first_guess_packets
        if guess is not None and 0 < guess < hi:
            if self.probe(guess):
                hi = guess
            else:
                lo = guess
        lo, hi = self._bisect(lo, hi)
        answers = [hi]
        for _ in range(self.rechecks):
            changed = False
            # The answer must pass again ...
            if not self.probe(hi, recheck=True):
                passes_above = sorted(p.buffer_packets for p in self.probes if p.passed and p.buffer_packets > hi)
                new_hi = passes_above[0] if passes_above else self.hi_packets
                lo, hi = self._bisect(hi, new_hi)
                changed = True
            # ... and the lower end of the bracket must fail again.
            elif lo >= 1 and self.probe(lo, recheck=True):
                fails_below = sorted(p.buffer_packets for p in self.probes if not p.passed and p.buffer_packets < lo)
                lo, hi = self._bisect(fails_below[-1] if fails_below else 0, lo)
                changed = True
            answers.append(hi)
            if not changed:
                return SearchResult(hi, hi * FRAME_BYTES, self.target, self.probes)
        # Still moving: adjacent buffers are within the noise of each other. Accept the answer if the
        # re-checks kept it within the resolution (at least 5 %, or 2 packets, the granularity of a
        # few-packet buffer); otherwise say the link is too noisy to decide.
        spread = max(answers) - min(answers)
        band = max(2, math.ceil(max(0.05, self.resolution) * max(answers)))
        note = f"re-checks moved the answer within {min(answers)}..{max(answers)} packets"
        return SearchResult(
            hi,
            hi * FRAME_BYTES,
            self.target,
            self.probes,
            converged=spread <= band,
            note=note + ("" if spread <= band else ": the link is too noisy at this target"),
        )
