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

from bufsize.longlived.crossing import Crossing, bracket, estimate
from bufsize.topologies import FRAME_BYTES

Measure = Callable[[int, int], list[float]]
# The precision rule's probes near the crossing go this share above and below the estimate at most
# (2 x precision below that): inside crossing.WINDOW (1.5), which the fit must stay within.
FINE_STEP = 0.2


@dataclass
class Probe:
    buffer_packets: int
    samples: list[float]
    median: float
    passed: bool
    extended: bool
    recheck: bool
    t: float


def sign_test(samples: list[float], target: float) -> float:
    """One-sided p-value that the median is above (positive) or below (negative) the target.

    The sign test needs no model of the noise: under "the median is the target" each sample lies
    above it with probability 1/2. Returns +p when more samples lie above, -p when more lie below
    (p: the chance of at least that lopsided a count), 1.0 when balanced. Samples equal to the
    target are left out.
    """
    above = sum(v > target for v in samples)
    below = sum(v < target for v in samples)
    n, k = above + below, max(above, below)
    if n == 0 or above == below:
        return 1.0
    p = sum(math.comb(n, i) for i in range(k, n + 1)) / 2**n
    return p if above > below else -p


@dataclass
class SearchResult:
    buffer_packets: int
    buffer_bytes: int
    target: float
    probes: list[Probe] = field(default_factory=list)
    converged: bool = True
    note: str = ""
    # The span of probed buffers (with the answer) whose verdict all the samples taken there did not
    # establish at the search's alpha, up to the next passing buffer when the answer is among them:
    # within it the link is too close to the target, or too noisy, to tell pass from fail. A wide span
    # means a flat, noisy utilization curve.
    uncertain_interval_packets: tuple[int, int] | None = None
    crossing: Crossing | None = None  # the precision rule's fit (crossing.py), None under the sign-test rule

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
    # Sequential sign test: a probe whose samples (pooled with earlier probes of the same buffer) do
    # not put the median decisively above or below the target at `alpha` gets `samples` more, up to
    # `max_samples` for that probe. Off: a fixed count (plus the margin extension).
    sequential: bool = False
    alpha: float = 0.05
    max_samples: int = 20
    # The precision rule (> 0): probes take `samples` each and the search stops when the crossing of
    # the target, fitted to every sample so far (crossing.py), is known to within +- this share of
    # itself (or to one packet) at `level`; no probe is decided on its own and nothing is re-checked
    # for its own sake. It gives up, unconverged, after `budget_samples` (0: 40 x samples).
    precision: float = 0.0
    level: float = 0.9
    budget_samples: int = 0
    progress: Callable[[Probe], None] | None = None
    probes: list[Probe] = field(default_factory=list)

    def pooled(self, packets: int) -> list[float]:
        return [v for p in self.probes if p.buffer_packets == packets for v in p.samples]

    def decisive(self, packets: int, extra: list[float] | None = None) -> int:
        """+1 passed decisively, -1 failed decisively, 0 not established (all samples at that buffer)."""
        p = sign_test(self.pooled(packets) + (extra or []), self.target)
        return (1 if p > 0 else -1) if abs(p) <= self.alpha else 0

    def uncertain_interval(self, answer: int) -> tuple[int, int]:
        """The span of probed buffers whose pooled samples did not establish a verdict, with the answer.

        When the answer's own verdict is one of them, the span reaches up to the next buffer above it
        that passed: had the answer's samples come out the other way, that buffer would be the answer.
        (The Reno sweep's N=200 answered 2 packets whose samples read 96.6 % once and 99.7 % later, and
        reported 2..2 before this.)"""
        unsure = [b for b in {p.buffer_packets for p in self.probes} if self.decisive(b) == 0]
        lo, hi = min([*unsure, answer]), max([*unsure, answer])
        if answer in unsure:
            above = sorted(b for b, ok in self.latest_verdicts().items() if ok and b > answer)
            hi = max(hi, above[0] if above else self.hi_packets)
        return lo, hi

    def latest_verdicts(self) -> dict[int, bool]:
        """Each probed buffer's most recent verdict: a re-check that overturned a verdict wins."""
        return {p.buffer_packets: p.passed for p in self.probes}

    def probe(self, packets: int, recheck: bool = False, plain: bool = False) -> bool:
        """Measure at `packets` and decide on the median; `plain`: exactly `samples` samples."""
        values = list(self.measure(packets * FRAME_BYTES, self.samples))
        if not values:
            raise ValueError(f"no utilization samples at {packets} packets")
        med = statistics.median(values)
        extended = False
        if not plain and abs(med - self.target) < self.margin and self.extra_samples > 0:
            values += list(self.measure(packets * FRAME_BYTES, self.extra_samples))
            med = statistics.median(values)
            extended = True
        while not plain and self.sequential and len(values) < self.max_samples and self.decisive(packets, values) == 0:
            values += list(self.measure(packets * FRAME_BYTES, min(self.samples, self.max_samples - len(values))))
            med = statistics.median(values)
            extended = True
        p = Probe(packets, values, med, med >= self.target, extended, recheck, time.time())
        self.probes.append(p)
        if self.progress:
            self.progress(p)
        return p.passed

    @staticmethod
    def _mid(lo: int, hi: int) -> int:
        """The next probe between lo (fails, or 0) and hi (passes): their geometric mean, strictly inside."""
        return max(lo + 1, min(hi - 1, round(math.sqrt(lo * hi)) if lo > 0 else (lo + hi) // 2))

    def _bisect(self, lo: int, hi: int) -> tuple[int, int]:
        """lo fails (or is 0), hi passes; narrow to adjacent packets."""
        while hi - lo > max(1, math.floor(self.resolution * hi)):
            mid = self._mid(lo, hi)
            if self.probe(mid):
                hi = mid
            else:
                lo = mid
        return lo, hi

    def _top_missed(self, plain: bool) -> SearchResult | None:
        """Probe the top of the range (unless it passes by definition); the result if it missed."""
        hi = self.hi_packets
        if self.assume_hi_passes or self.probe(hi, plain=plain):
            return None
        note = f"even {hi} packets missed the target; the answer is above the search range"
        return SearchResult(hi, hi * FRAME_BYTES, self.target, self.probes, converged=False, note=note)

    def run(self) -> SearchResult:
        if self.hi_packets < 1:
            raise ValueError("hi_packets must be at least 1")
        if self.precision > 0:
            return self._run_precision()
        hi = self.hi_packets
        if (missed := self._top_missed(plain=False)) is not None:
            return missed
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
                if hi == self.hi_packets:
                    # Nothing above to fall back on: the answer would be a buffer that just failed.
                    return self._result(
                        hi,
                        converged=False,
                        note=f"the top of the search range, {hi} packets, missed the target when re-checked: "
                        "the link's rate moved since calibration, or the target is within its noise",
                    )
                # Resume from the nearest buffer above that still passes: one that passed once and
                # failed when probed again is no upper end (it would be answered unconfirmed).
                passes_above = sorted(b for b, ok in self.latest_verdicts().items() if ok and b > hi)
                new_hi = passes_above[0] if passes_above else self.hi_packets
                lo, hi = self._bisect(hi, new_hi)
                changed = True
            # ... and the lower end of the bracket must fail again.
            elif lo >= 1 and self.probe(lo, recheck=True):
                fails_below = sorted(b for b, ok in self.latest_verdicts().items() if not ok and b < lo)
                lo, hi = self._bisect(fails_below[-1] if fails_below else 0, lo)
                changed = True
            answers.append(hi)
            if not changed:
                return self._result(hi)
        # Still moving: adjacent buffers are within the noise of each other. Accept the answer if the
        # re-checks kept it within the resolution (at least 5 %, or 2 packets, the granularity of a
        # few-packet buffer); otherwise say the link is too noisy to decide.
        spread = max(answers) - min(answers)
        band = max(2, math.ceil(max(0.05, self.resolution) * max(answers)))
        note = f"re-checks moved the answer within {min(answers)}..{max(answers)} packets"
        return self._result(
            hi,
            converged=spread <= band,
            note=note + ("" if spread <= band else ": the link is too noisy at this target"),
        )

    def _result(self, answer: int, converged: bool = True, note: str = "") -> SearchResult:
        return SearchResult(
            answer, answer * FRAME_BYTES, self.target, self.probes, converged, note, self.uncertain_interval(answer)
        )

    # ---- the precision rule ----------------------------------------------------------------------

    def crossing(self) -> Crossing | None:
        samples: dict[int, list[float]] = {}
        for p in self.probes:
            samples.setdefault(p.buffer_packets, []).extend(p.samples)
        return estimate(samples, self.target, self.level)

    def precise_enough(self, c: Crossing) -> bool:
        """Known to within +-precision, or to one packet (a whole-packet answer can say no more). An
        estimate held inside the medians' bracket while the line crosses outside it is not precise by
        the share, but it is to one packet when the estimate and the interval together span at most
        one: a few packets from the answer the curve bends sharply (BBR at N = 10: 3 packets 88-97 %,
        4 about 99.3 %, 5 about 99.7 %), the straight line through the three crosses between 4 and 5
        while the medians say 4 already passes, and more samples sharpen that disagreement instead of
        ending it."""
        if min(c.low, c.packets) >= max(c.high, c.packets) - 1.0:
            return True
        return c.low <= c.packets <= c.high and c.half_width() <= self.precision

    def _bracket(self) -> tuple[int, int]:
        """(largest failing, smallest passing) buffer around the crossing by the pooled medians of all
        samples so far, so a probe misread once is outvoted when probed again; (0, top) before any."""
        medians = {b: statistics.median(self.pooled(b)) for b in {p.buffer_packets for p in self.probes}}
        if self.assume_hi_passes:
            medians.setdefault(self.hi_packets, math.inf)
        br = bracket(medians, self.target)
        if br is not None:
            return br
        passes = [b for b, m in medians.items() if m >= self.target]
        return (0, min(passes)) if passes else (max(medians, default=0), self.hi_packets)

    def _next_buffer(self, c: Crossing | None, lo: int, hi: int, step: int) -> int:
        """Bisect (in log space) while the bracket is wider than a factor of 2; near the crossing, probe
        at the estimate and, in turn, 2 x precision above and below it, so the fit gets both its level
        and its slope where the answer is decided. The step stays at most FINE_STEP: a wider one (a
        looser precision) put the probes outside the fit's window (crossing.WINDOW), whose fit then
        never counted as local, and 3 in 4 simulated N = 100 searches at precision 0.2 ran out of
        budget."""
        if c is None or hi > 2 * max(lo, 1):
            return self._mid(lo, hi)
        d = min(2 * self.precision, FINE_STEP)
        factor = (1.0, 1 + d, 1 - d)[step % 3]
        return max(1, min(self.hi_packets, round(c.packets * factor)))

    def _run_precision(self) -> SearchResult:
        hi = self.hi_packets
        if (missed := self._top_missed(plain=True)) is not None:
            return missed
        budget = self.budget_samples or 40 * self.samples
        guess = self.first_guess_packets
        if guess is not None and 0 < guess < hi:
            self.probe(guess, plain=True)
        step = 0
        while True:
            lo, hi = self._bracket()
            c = self.crossing()
            recheck = None
            if c is not None and c.local and self.precise_enough(c):
                # The two buffers that decide where the crossing lies are re-checked before stopping
                # (a median of a few samples can be misread): the one with fewer samples first.
                recheck = min(c.bracket, key=lambda b: len(self.pooled(b)))
                if len(self.pooled(recheck)) >= 2 * self.samples:
                    return self._precision_result(c, converged=True)
            taken = sum(len(p.samples) for p in self.probes)
            if taken >= budget:
                if c is None:
                    return self._result(hi, converged=False, note=f"no crossing of the target after {taken} samples")
                return self._precision_result(c, converged=False)
            if hi - lo <= 1 and lo == 0:  # one packet passes: nothing smaller to look at
                return self._result(hi)
            if recheck is not None:
                self.probe(recheck, recheck=True, plain=True)
                continue
            fine = c is not None and hi <= 2 * max(lo, 1)
            up = None if fine else self._up_from_guess(lo, hi)
            self.probe(up or self._next_buffer(c if fine else None, lo, hi, step), plain=True)
            step += fine

    def _up_from_guess(self, lo: int, hi: int) -> int | None:
        """Twice the largest failing buffer while a first guess was given and nothing has passed yet
        (the top of the range aside), None otherwise. A guess from a cc rule or from the sweep's last
        answer usually lies within a factor of two of the answer, so doubling brackets it in one
        probe where bisecting toward the top takes three."""
        if self.first_guess_packets is None or lo < 1:
            return None
        if any(p.passed for p in self.probes if p.buffer_packets < self.hi_packets):
            return None
        return 2 * lo if 2 * lo < hi else None

    def _precision_result(self, c: Crossing, converged: bool) -> SearchResult:
        # The whole packet above the crossing, but never the failing end of the medians' bracket: an
        # estimate held there (the line crossing below it) would round to a buffer that failed.
        answer = max(1, min(self.hi_packets, max(math.ceil(c.packets - 1e-9), c.bracket[0] + 1)))
        taken = sum(len(p.samples) for p in self.probes)
        # The interval holds the estimate (Crossing.interval: the one-packet stop allows an estimate
        # just outside the line's interval) and the answer too. (On the simulated N = 400 link the
        # line's interval alone held the true crossing in 77 of 100 such searches;
        # bench/results/search-rule-offline.md.)
        low, high = c.interval(self.hi_packets)
        high = max(high, answer)
        interval = (math.floor(low), min(self.hi_packets, math.ceil(high)))
        note = (
            f"the target is crossed at {c.packets:.1f} packets, {c.level:.0%} interval {low:.1f}..{high:.1f}, "
            f"from {taken} samples at {len(c.buffers)} buffers near it"
        )
        if not converged:
            note += f": not within +-{self.precision:.0%} after the {taken} samples allowed (a flat, noisy curve)"
        return SearchResult(answer, answer * FRAME_BYTES, self.target, self.probes, converged, note, interval, c)
