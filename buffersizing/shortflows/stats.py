"""What short-flow runs report: completion time by size, the queue's tail, flows in congestion avoidance.

Pure functions of recorded data (the generator's rows, the queue monitor's samples, the cwnd
trace), so they are unit-tested without a network.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from bufsize.traffic.workload import MSS_BYTES, wire_bytes


def percentile(xs: Sequence[float], p: float) -> float:
    """The p-quantile for p in whole hundredths, by the standard library's inclusive method (linear
    interpolation between order statistics, numpy's default); NaN without data."""
    if not xs:
        return math.nan
    if len(xs) == 1:  # statistics.quantiles wants two points on Python 3.11
        return float(xs[0])
    k = round(p * 100)
    if not 0 < k < 100 or abs(k - p * 100) > 1e-9:
        raise ValueError(f"percentile: p={p} is not a whole number of hundredths in (0, 1)")
    return statistics.quantiles(xs, n=100, method="inclusive")[k - 1]


def size_packets(size_bytes: int) -> int:
    return max(1, math.ceil(size_bytes / MSS_BYTES))


def size_bins(rows: Sequence[dict]) -> list[tuple[int, int]]:
    """Bins of flow length in packets: one per length if there are at most 12 distinct lengths,
    else powers of two (1, 2-3, 4-7, ...). Each bin is (first, last) packets, inclusive."""
    lengths = sorted({size_packets(r["size_bytes"]) for r in rows})
    if len(lengths) <= 12:
        return [(n, n) for n in lengths]
    top = lengths[-1]
    bins, lo = [], 1
    while lo <= top:
        bins.append((lo, 2 * lo - 1))
        lo *= 2
    return bins


def fct_by_size(rows: Sequence[dict]) -> list[dict]:
    """Completion time of the finished transfers per length bin: count, mean, median, p95 (s), and
    the mean retransmissions and the share retransmitting (None unless every row counts them: the
    twin's rows do not)."""
    done = [r for r in rows if r["status"] == "done"]
    out = []
    for lo, hi in size_bins(done):
        sel = [r for r in done if lo <= size_packets(r["size_bytes"]) <= hi]
        if not sel:
            continue
        fct = [r["fct_s"] for r in sel]
        counted = all(r.get("retrans") is not None for r in sel)
        out.append(
            {
                "packets": f"{lo}" if lo == hi else f"{lo}-{hi}",
                "packets_lo": lo,
                "packets_hi": hi,
                "transfers": len(sel),
                "mean_s": round(statistics.fmean(fct), 6),
                "median_s": round(percentile(fct, 0.5), 6),
                "p95_s": round(percentile(fct, 0.95), 6),
                "retrans_mean": round(statistics.fmean(r["retrans"] for r in sel), 3) if counted else None,
                "with_retrans": round(sum(r["retrans"] > 0 for r in sel) / len(sel), 4) if counted else None,
            }
        )
    return out


def transfer_counts(rows: Sequence[dict]) -> dict:
    counts = {"started": len(rows), "done": 0, "failed": 0, "unfinished": 0}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return counts


def started_between(rows: Sequence[dict], t0: float, t1: float) -> list[dict]:
    return [r for r in rows if t0 <= r["t_start"] < t1]


def offered_load(rows: Sequence[dict], seconds: float, rate_mbps: float) -> float:
    """Wire bytes of the transfers in `rows` over `seconds`, as a fraction of the rate."""
    if seconds <= 0:
        return math.nan
    return sum(wire_bytes(r["size_bytes"]) for r in rows) * 8 / seconds / (rate_mbps * 1e6)


def initial_windows(rows: Sequence[dict]) -> dict[int, int]:
    """How many transfers started with each initial window (packets), as TCP_INFO gave it."""
    seen: dict[int, int] = {}
    for r in rows:
        if r["init_cwnd"] > 0:
            seen[r["init_cwnd"]] = seen.get(r["init_cwnd"], 0) + 1
    return dict(sorted(seen.items()))


def queue_ccdf(backlogs: Sequence[int], points: int = 60) -> list[tuple[int, float]]:
    """P(Q >= b) for b from 0 to the largest backlog seen (at most `points` values of b, always
    including 0 and the largest), from queue samples taken at a fixed rate."""
    if not backlogs:
        return []
    n, top = len(backlogs), max(backlogs)
    counts = [0] * (top + 2)
    for q in backlogs:
        counts[q] += 1
    at_least = [0] * (top + 2)
    for b in range(top, -1, -1):
        at_least[b] = at_least[b + 1] + counts[b]
    step = max(1, math.ceil((top + 1) / points))
    bs = sorted(set(range(0, top + 1, step)) | {top})
    return [(b, round(at_least[b] / n, 6)) for b in bs]


def tail_slope(ccdf: Sequence[tuple[int, float]], min_probability: float = 1e-3) -> float | None:
    """The decay rate kappa of a log-linear tail P(Q >= b) ~ exp(-kappa b), fitted by least squares
    to ln P over the points with b > 0 and P >= min_probability (fewer samples below are noise)."""
    pts = [(b, math.log(p)) for b, p in ccdf if b > 0 and p >= min_probability]
    if len(pts) < 3:
        return None
    mb = statistics.fmean(b for b, _ in pts)
    ml = statistics.fmean(lp for _, lp in pts)
    den = sum((b - mb) ** 2 for b, _ in pts)
    if den == 0:
        return None
    slope = sum((b - mb) * (lp - ml) for b, lp in pts) / den
    return round(-slope, 6)


def throughput_distribution(mbps: Sequence[float], fair_mbps: float) -> dict:
    """Per-flow throughput of the long flows: spread, and Jain's fairness index."""
    if not mbps:
        return {"flows": 0}
    total_sq = sum(x * x for x in mbps)
    return {
        "flows": len(mbps),
        "fair_share_mbps": round(fair_mbps, 4),
        "mean_mbps": round(statistics.fmean(mbps), 4),
        "min_mbps": round(min(mbps), 4),
        "p5_mbps": round(percentile(mbps, 0.05), 4),
        "median_mbps": round(percentile(mbps, 0.5), 4),
        "p95_mbps": round(percentile(mbps, 0.95), 4),
        "max_mbps": round(max(mbps), 4),
        "jain_index": round(sum(mbps) ** 2 / (len(mbps) * total_sq), 4) if total_sq > 0 else None,
    }
