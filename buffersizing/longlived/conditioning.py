"""How well the target pins the buffer down: the curve a search measured, and the range of buffers over
which utilization is within its own noise of the target.

Near N = 100 utilization changes by well under a point over a factor of several in buffer, so a
small difference in how utilization is measured moves the answer several-fold; one number hides it.
A search therefore reports, beside its answer, every probed buffer's median with an interval, and the
range of probed buffers whose interval holds the target: within it the samples cannot tell pass from
fail. Where that range reaches further from the answer than the precision asked for, the result says
it is ill-conditioned, with the range, in fields a program reads.

The interval of a buffer's median is the noise of one sample pooled over every buffer (the same
trimmed estimate the crossing uses, crossing.NOISE_ESTIMATE), scaled for a median of that buffer's
samples, at the search's level; a buffer sampled once has no interval of its own noise and gets the
pooled one.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from bufsize.longlived import crossing
from bufsize.longlived.median_search import Probe

# The precision a search without the precision rule is judged against: the resolution the presets'
# sign test stopped at.
DEFAULT_PRECISION = 0.1


def curve(probes: Sequence[Probe], level: float = 0.9) -> list[dict]:
    """Per probed buffer, in order: its samples pooled, their median and the median's interval."""
    pooled: dict[int, list[float]] = {}
    for p in probes:
        pooled.setdefault(p.buffer_packets, []).extend(p.samples)
    noise, dof = crossing.NOISE_ESTIMATE(list(pooled.values()))
    t = crossing.t_quantile(0.5 + level / 2, max(crossing.MIN_DOF, dof))
    rows = []
    for b in sorted(pooled):
        v = pooled[b]
        half = t * crossing.MEDIAN_EFFICIENCY * noise / math.sqrt(len(v)) if dof > 0 else math.inf
        m = statistics.median(v)
        rows.append({
            "buffer_packets": b, "samples": len(v), "median": round(m, 5),
            "low": round(m - half, 5) if math.isfinite(half) else None,
            "high": round(m + half, 5) if math.isfinite(half) else None,
        })  # fmt: skip
    return rows


def conditioning(probes: Sequence[Probe], target: float, answer: int, precision: float, level: float = 0.9) -> dict:
    """The probed buffers whose median's interval holds the target, as a range with the answer, its
    ratio to the answer, and whether that range is wider than `precision` (0: the default) allows."""
    rows = curve(probes, level)
    unsure = [r["buffer_packets"] for r in rows if r["low"] is None or r["low"] <= target <= r["high"]]
    low, high = min([*unsure, answer]), max([*unsure, answer])
    allowed = precision or DEFAULT_PRECISION
    ill = (answer - low) / answer > allowed or (high - answer) / answer > allowed
    if ill:
        statement = f"ill-conditioned: the target is reached anywhere in [{low}, {high}] packets"
    else:
        statement = f"well-conditioned: within +-{allowed:.0%} of the answer"
    return {
        "range_packets": [low, high],
        "range_to_answer": [round(low / answer, 3), round(high / answer, 3)],
        "precision": allowed,
        "ill_conditioned": ill,
        "statement": statement,
        "curve": rows,
    }
