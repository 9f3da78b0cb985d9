"""Where utilization crosses the target, from every sample taken so far, and how sure that is.

The precision rule of the search (median_search.MedianSearch with `precision`) stops when this
interval is narrow enough, instead of deciding each probe on its own. Near the answer utilization
rises smoothly with the logarithm of the buffer (the committed searches: at N = 10, 0.982 at 35
packets, 0.990 at 50, 0.997 at 71), so a straight line through the per-buffer medians against
ln(buffer), over the probes around the crossing, says where it reaches the target. The fit is on
medians, weighted by how many samples each has, so one wild sample (a flow restarting) moves it no
more than it moves the median-filtered search.

The interval comes from the line's standard errors, with the noise of one sample estimated from
all samples near the crossing pooled (the differences between samples at the same buffer): a
bootstrap of three samples per buffer, tried first, covered the true crossing in only half the
simulated searches (bench/search_rule_offline.py). The estimate leaves out the largest tenth of
those differences because the samples' tail is heavy and one-sided: a sample taken while a flow sat
in a timeout reads 3-12 points low (the committed N = 10 samples: standard deviation 0.011, 0.007
from their quartiles), and such a sample barely moves a median, so it should not widen the interval
of a fit to medians either.

A line whose rise is not clear of its own error (a flat, noisy stretch) bounds nothing: the
interval is then 0..infinity, so such a curve never reads as precise.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

# Buffers within this factor of the estimate take part in the fit: wide enough for a slope, narrow
# enough that the curve's bend toward full utilization does not tilt the line much (N = 100: 0.957
# at 7 packets, 0.979 at 9, 0.992 at 11, 0.9998 at 22). The failing and the passing buffer next to
# the crossing join it when it would lack either.
WINDOW = 1.5
# A buffer at the window's edge stays inside it whichever way the float rounding went.
_ROUNDING = 1e-9
# The median of n samples scatters sqrt(pi/2) times as much as their mean (normal samples).
MEDIAN_EFFICIENCY = math.sqrt(math.pi / 2)
# Pooled degrees of freedom below which the noise estimate means little: no interval yet.
MIN_DOF = 6
# The noise estimate drops this share of the largest differences between samples at one buffer.
# Against the committed samples' own noise (bench/search_rule_offline.py --noise committed, 200
# seeds) the full root mean square left 30 % of N = 10 searches unconverged at their budget, a median
# of the differences (no tail at all) let the 90 % interval hold the truth in only 82-85 % at N = 10
# and 400, and dropping the largest 10 % held it in 87-89 % with 9 % unconverged.
TRIM = 0.10
_EDGE = statistics.NormalDist().inv_cdf(1 - TRIM / 2)
# E[Z^2 | |Z| < edge] for a standard normal Z: what the trimmed mean square of x - y (variance 2 sd^2)
# is short of 2 sd^2, so the estimate is unbiased for normal samples.
_TRIMMED_SHARE = 1 - 2 * _EDGE * statistics.NormalDist().pdf(_EDGE) / (1 - TRIM)
# A trimmed estimate is worth about this share of the degrees of freedom in the t quantile.
PAIR_EFFICIENCY = 0.9


@dataclass(frozen=True)
class Crossing:
    packets: float  # where the fitted line reaches the target
    low: float  # the interval at `level` (0 and inf when the fit cannot bound it)
    high: float
    level: float
    slope: float  # utilization per unit of ln(buffer)
    noise: float  # the standard deviation of one sample, pooled over the fit's buffers (robust_sd)
    buffers: tuple[int, ...]  # the buffers the fit used
    bracket: tuple[int, int]  # the failing and the passing buffer next to the crossing (pooled medians)

    @property
    def local(self) -> bool:
        """Every buffer of the fit lies within WINDOW of the estimate: none was pulled in from afar
        for want of a failing or passing one nearby, where the curve's bend would bias the line."""
        return all(in_window(b, self.packets) for b in self.buffers)

    def interval(self, top: float = math.inf) -> tuple[float, float]:
        """The interval to report: the line's, holding the estimate too. An estimate is held inside the
        medians' bracket, so it can lie outside the line's interval when the line crosses beyond the
        bracket; the medians then say the crossing lies within the bracket and the line says outside,
        and the interval reaches the bracket's other end to cover both. `top`: where an interval that
        reaches past it ends (the search's top buffer: a slope barely clear of its error puts the
        line's end far beyond anything probed, even past float's range)."""
        high = min(self.high, top)
        low, high = min(self.low, self.packets), max(high, self.packets)
        if self.packets < self.low:
            low = min(low, self.bracket[0])
        if self.packets > self.high:
            high = max(high, self.bracket[1])
        return low, high

    def half_width(self) -> float:
        """Half the interval, relative to the estimate."""
        return (self.high - self.low) / 2 / self.packets

    def to_dict(self) -> dict:
        return {
            "packets": round(self.packets, 2),
            "low": round(self.low, 2),
            "high": round(self.high, 2) if math.isfinite(self.high) else None,
            "level": self.level,
            "slope_per_ln_buffer": round(self.slope, 5),
            "sample_sd": round(self.noise, 5),
            "buffers": list(self.buffers),
            "bracket": list(self.bracket),
        }


def bracket(medians: dict[int, float], target: float) -> tuple[int, int] | None:
    """The failing and the passing buffer next to the crossing: the smallest buffer whose median
    passes and is above some failing buffer, and the largest failing buffer below it; None when all
    pass or all fail."""
    order = sorted(medians)
    for i, b in enumerate(order):
        if medians[b] >= target and i > 0:
            fails = [a for a in order[:i] if medians[a] < target]
            if fails:
                return fails[-1], b
    return None


def rms_sd(groups: list[list[float]]) -> tuple[float, int]:
    """The plain pooled standard deviation around each buffer's mean (the estimate before robust_sd;
    bench/search_rule_offline.py --noise-estimate rms compares the two)."""
    ss = sum(sum((v - statistics.fmean(g)) ** 2 for v in g) for g in groups if len(g) > 1)
    dof = sum(len(g) - 1 for g in groups if len(g) > 1)
    return (math.sqrt(ss / dof) if dof else math.inf), dof


def robust_sd(groups: list[list[float]]) -> tuple[float, int]:
    """Standard deviation of one sample from the differences x - y over all pairs of samples at the
    same buffer (a difference does not depend on the buffer's level), the largest TRIM of them left
    out; and its degrees of freedom (samples less one per buffer). A sample far out in the tail enters
    only its own buffer's pairs, which are the ones left out."""
    diffs = sorted(abs(g[i] - g[j]) for g in groups for i in range(len(g)) for j in range(i))
    dof = sum(len(g) - 1 for g in groups if len(g) > 1)
    if not diffs:
        return math.inf, dof
    kept = diffs[: max(1, math.ceil(len(diffs) * (1 - TRIM)))]
    return math.sqrt(sum(d * d for d in kept) / len(kept) / (2 * _TRIMMED_SHARE)), dof


NOISE_ESTIMATE = robust_sd


def in_window(buffer: float, center: float) -> bool:
    """Within a factor WINDOW of center, edges included."""
    return center / WINDOW * (1 - _ROUNDING) <= buffer <= center * WINDOW * (1 + _ROUNDING)


def window(medians: dict[int, float], center: float, br: tuple[int, int], target: float) -> list[int]:
    """Buffers within WINDOW of center, with the bracket's failing or passing end where none fails or passes."""
    used = {b for b in medians if in_window(b, center)}
    if not any(medians[b] < target for b in used):
        used.add(br[0])
    if not any(medians[b] >= target for b in used):
        used.add(br[1])
    return sorted(used)


def estimate(samples: dict[int, list[float]], target: float, level: float = 0.9) -> Crossing | None:
    """The crossing from the samples at each buffer (packets -> utilizations); None until some buffer
    fails and a larger one passes."""
    medians = {b: statistics.median(v) for b, v in samples.items() if v}
    br = bracket(medians, target)
    if br is None:
        return None
    # Twice: around the bracket's middle, then around the first estimate.
    center = math.sqrt(br[0] * br[1])
    for _ in range(2):
        used = window(medians, center, br, target)
        fit = _fit([(math.log(b), medians[b], len(samples[b])) for b in used], target)
        x = fit[0] if fit is not None else math.log(center)
        # No extrapolation: the crossing lies within the bracket the medians show. Clamped after
        # exp, so a crossing held at an end is that end exactly (exp(log(9)) is 9.000000000000002,
        # which would put a buffer at exactly 9 / WINDOW outside the window, and the search would
        # probe on with its interval already inside the precision asked for).
        center = min(max(_exp(x), float(br[0])), float(br[1]))
    noise, dof = NOISE_ESTIMATE([samples[b] for b in used])
    low, high = 0.0, math.inf
    slope = fit[1] if fit is not None else 0.0
    if fit is not None and dof >= MIN_DOF:
        _, slope, xbar, weight, ybar, sxx = fit
        var_median = (MEDIAN_EFFICIENCY * noise) ** 2  # of the median of one sample; of n: / n
        vy, vs = var_median / weight, var_median / sxx
        t = t_quantile(0.5 + level / 2, max(MIN_DOF, round(PAIR_EFFICIENCY * dof)))
        # Fieller's interval for the ratio (target - ybar) / slope: it widens without bound as the
        # slope's own error approaches the slope, where a plain standard error would not.
        a = slope**2 - t**2 * vs
        if a > 0:
            dy = target - ybar
            root = t * math.sqrt(a * vy + vs * dy**2)
            low = _exp(xbar + (slope * dy - root) / a)
            high = _exp(xbar + (slope * dy + root) / a)
    return Crossing(center, low, high, level, slope, noise, tuple(used), br)


def _exp(x: float) -> float:
    """exp, but infinite past float's range: a slope barely clear of its error puts an end there."""
    return math.exp(x) if x < 700 else math.inf


Fit = tuple[float, float, float, float, float, float]


def _fit(points: list[tuple[float, float, int]], target: float) -> Fit | None:
    """Weighted least squares of median on ln(buffer) (weights: sample counts): (ln buffer where the
    line reaches the target, slope, weighted mean of ln buffer, total weight, weighted mean of the
    medians, weighted Sxx); None when the line does not rise."""
    w = sum(n for _, _, n in points)
    mx = sum(x * n for x, _, n in points) / w
    my = sum(y * n for _, y, n in points) / w
    sxx = sum(n * (x - mx) ** 2 for x, _, n in points)
    if sxx <= 0:
        return None
    slope = sum(n * (x - mx) * (y - my) for x, y, n in points) / sxx
    if slope <= 0:
        return None
    return mx + (target - my) / slope, slope, mx, w, my, sxx


def t_quantile(p: float, dof: int) -> float:
    """Student's t quantile from the normal one (Cornish-Fisher, two terms): within 1 % from 6 degrees
    of freedom, which is all the interval needs (the noise estimate behind it is rougher)."""
    # Not scipy.stats.t.ppf: scipy (tens of MB) for one quantile whose extra precision the interval cannot use.
    z = statistics.NormalDist().inv_cdf(p)
    return z + (z**3 + z) / (4 * dof) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * dof**2)
