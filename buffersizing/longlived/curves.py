"""A sweep's curves: utilization against buffer, one line per N, from every probe of every run.

The sweep's figure gives one answer per run; near a flat curve that answer hides how little
utilization changes over a wide range of buffers. This figure shows the curve itself. At each
buffer probed: the median of every utilization sample taken there, with the 10th to 90th
percentile of the samples (their own noise). Through them: the fitted curve, the monotone
(isotonic) fit of the medians against buffer, weighted by their samples, since utilization cannot
fall as the buffer grows; its band is the 5-95 % range of the same fit over bootstrap resamples of
each buffer's samples. Beneath the target line, each run's conditioning range: the buffers over
which its utilization was within its own noise of the target (result.json's `conditioning`). Runs
flagged invalid are drawn too, apart (hollow markers, no line), so a curve is never hidden by the
validity of its runs. With a twin sweep, the emulated and the twin's curves are side by side on one
utilization axis. curves.csv holds the numbers drawn.

The fit is isotonic rather than a formula because no formula is known to hold over every N, rate
and congestion control, and pool-adjacent-violators is a dozen lines here (no library of this
project's dependencies has it).
"""

from __future__ import annotations

import csv
import random
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bufsize.longlived.conditioning import conditioning
from bufsize.longlived.median_search import Probe

BAND = (0.1, 0.9)  # the quantiles of the samples at one buffer (deciles 1 and 9 below)
FIT_BAND = (0.05, 0.95)  # the fitted curve's band: these quantiles of the bootstrap fits
RESAMPLES = 200  # bootstrap fits per curve: a band stable to a few hundredths of a point
SEED = 1  # the bootstrap's, so the same sweep draws the same band


def curve(results: Sequence[dict], flows: int, valid: bool) -> list[tuple[float, float, float, float]]:
    """(buffer packets, median, low, high) at each buffer probed at N = `flows` by the runs whose
    validity is `valid`, samples pooled over those runs."""
    return medians(pooled_samples(results, flows, valid))


def medians(pooled: dict[float, list[float]]) -> list[tuple[float, float, float, float]]:
    """(buffer, median, 10th and 90th percentile) of each buffer's samples."""
    rows = []
    for buffer, samples in pooled.items():
        deciles = statistics.quantiles(samples, n=10, method="inclusive") if len(samples) > 1 else [samples[0]] * 9
        rows.append((buffer, statistics.median(samples), deciles[0], deciles[-1]))
    return rows


def pooled_samples(results: Sequence[dict], flows: int, valid: bool) -> dict[float, list[float]]:
    pooled: dict[float, list[float]] = {}
    for r in results:
        if r.get("flows") != flows or bool(r.get("valid", True)) != valid:
            continue
        for p in r.get("probes") or []:
            samples = [float(s) for s in p.get("samples") or []]
            if samples:
                pooled.setdefault(float(p["buffer_packets"]), []).extend(samples)
    return dict(sorted(pooled.items()))


def isotonic(values: Sequence[float], weights: Sequence[float]) -> list[float]:
    """The non-decreasing sequence nearest `values` in weighted least squares (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    for v, w in zip(values, weights, strict=True):
        blocks.append([v, w, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m1, w1, c1), (m2, w2, c2) = blocks.pop(-2), blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, c1 + c2])
    return [m for m, _, c in blocks for _ in range(int(c))]


def fit(pooled: dict[float, list[float]]) -> list[tuple[float, float, float, float]]:
    """(buffer, fit, band low, band high) at each buffer: the isotonic fit of the medians weighted by
    their samples, and its bootstrap band (a buffer sampled once varies only through its neighbours)."""
    if not pooled:
        return []
    buffers, groups = list(pooled), list(pooled.values())
    weights = [len(g) for g in groups]
    best = isotonic([statistics.median(g) for g in groups], weights)
    rng = random.Random(SEED)
    fits = [isotonic([statistics.median(rng.choices(g, k=len(g))) for g in groups], weights) for _ in range(RESAMPLES)]
    rows = []
    for i, b in enumerate(buffers):
        at = sorted(f[i] for f in fits)
        low, high = at[int(FIT_BAND[0] * (RESAMPLES - 1))], at[int(round(FIT_BAND[1] * (RESAMPLES - 1)))]
        rows.append((b, best[i], min(low, best[i]), max(high, best[i])))
    return rows


def ranges(results: Sequence[dict], flows: int) -> list[tuple[float, float]]:
    """Each run's conditioning range at N = `flows` (buffers within the noise of the target): as its
    result.json records it, or, for a result written before the field, from its probes by the same rule."""
    found = []
    for r in results:
        if r.get("flows") != flows:
            continue
        got = (r.get("conditioning") or {}).get("range_packets") or recomputed_range(r)
        if got:
            found.append((float(got[0]), float(got[1])))
    return found


def recomputed_range(r: dict) -> list[int] | None:
    probes, answer, o = r.get("probes"), r.get("buffer_packets"), r.get("options") or {}
    if not probes or not answer or r.get("target") is None:
        return None
    # The rule reads a probe's buffer and samples alone.
    measured = [Probe(int(p["buffer_packets"]), [float(x) for x in p["samples"]], 0.0, False, False, False, 0.0)
                for p in probes if p.get("samples")]  # fmt: skip
    if not measured:
        return None
    precision = o.get("precision") or o.get("resolution") or 0.0
    return conditioning(measured, r["target"], answer, precision, o.get("level") or 0.9)["range_packets"]


def has_probes(results: Sequence[dict]) -> bool:
    return any(p.get("samples") for r in results for p in r.get("probes") or [])


def plot_curves(
    panels: Sequence[tuple[str, Sequence[dict]]], out: Path, title: str, flows: Sequence[int] | None = None
) -> list[Path]:
    """curves.png and curves.csv in `out`: one panel per (label, sweep's results), one line per N
    (`flows`, default every N of the first sweep); nothing when no sweep has probes (a result
    written without them)."""
    if not any(has_probes(results) for _, results in panels):
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bufsize.topologies.safefiles import open_new, save_figure

    ns = sorted(set(flows or (r["flows"] for r in panels[0][1])))
    colours = {n: plt.get_cmap("viridis")(i / max(1, len(ns) - 1) * 0.9) for i, n in enumerate(ns)}
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 5.5), sharey=True, squeeze=False)
    table: list[dict] = []
    for ax, (label, results) in zip(axes[0], panels, strict=True):
        drew_ranges = False
        for i, n in enumerate(ns):
            table += draw_n(ax, results, n, colours[n], label)
            # A strip along the panel's foot, one row per N; a tick at each end shows a range of one buffer.
            for lo, hi in ranges(results, n):
                drew_ranges = True
                ax.plot([lo, hi], [0.03 + 0.025 * i] * 2, "|-", color=colours[n], linewidth=2.5, markersize=7,
                        alpha=0.45, transform=ax.get_xaxis_transform())  # fmt: skip
        for t in {r.get("target") for r in results if r.get("target") is not None}:
            ax.axhline(t, color="0.3", linestyle="--", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("buffer (packets)" + ("; bars at the foot: each run's conditioning range" if drew_ranges else ""))
        ax.set_title(label, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="center right")
    axes[0][0].set_ylabel("utilization")
    fig.suptitle(f"{title}\nmarkers: medians, bars {BAND[0]:.0%}-{BAND[1]:.0%} of the samples; lines: isotonic fit, "
                 f"band {FIT_BAND[0]:.0%}-{FIT_BAND[1]:.0%} of its bootstrap", fontsize=10)  # fmt: skip
    fig.tight_layout()
    path = out / "curves.png"
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    numbers = out / "curves.csv"
    with open_new(numbers) as f:
        w = csv.DictWriter(f, fieldnames=list(table[0]) if table else ["sweep"])
        w.writeheader()
        w.writerows(table)
    return [path, numbers]


def draw_n(ax: Any, results: Sequence[dict], n: int, colour: Any, label: str) -> list[dict]:
    """One N's curve on `ax`: the valid runs' medians with the fit and its band, the flagged runs'
    medians apart; returns the rows of curves.csv it drew."""
    rows: list[dict] = []
    for valid in (True, False):
        pooled = pooled_samples(results, n, valid)
        if not pooled:
            continue
        drawn = medians(pooled)
        x, med, lo, hi = (list(c) for c in zip(*drawn, strict=True))
        # Never below 0: interpolated deciles of equal samples can miss the median by a rounding.
        bars = [[max(0.0, m - a) for m, a in zip(med, lo, strict=True)],
                [max(0.0, b - m) for m, b in zip(med, hi, strict=True)]]  # fmt: skip
        fitted = fit(pooled) if valid else []
        if valid:
            _, best, band_lo, band_hi = (list(c) for c in zip(*fitted, strict=True))
            ax.fill_between(x, band_lo, band_hi, color=colour, alpha=0.2, linewidth=0)
            ax.plot(x, best, "-", color=colour, linewidth=1.5, label=f"N = {n}")
            ax.errorbar(x, med, yerr=bars, fmt="o", color=colour, markersize=4, linewidth=0.6)
        else:
            ax.errorbar(x, med, yerr=bars, fmt="o", mfc="none", color=colour, markersize=5, linewidth=0.8,
                        label=f"N = {n}, flagged runs")  # fmt: skip
        for j, (b, m, a, z) in enumerate(drawn):
            row = {"sweep": label, "flows": n, "valid": valid, "buffer_packets": b, "samples": len(pooled[b]),
                   "median": round(m, 5), "p10": round(a, 5), "p90": round(z, 5)}  # fmt: skip
            f = fitted[j] if fitted else None
            row |= {"fit": round(f[1], 5) if f else "", "fit_low": round(f[2], 5) if f else "",
                    "fit_high": round(f[3], 5) if f else ""}  # fmt: skip
            rows.append(row)
    return rows
