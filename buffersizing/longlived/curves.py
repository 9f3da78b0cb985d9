"""A sweep's curves: utilization against buffer, one line per N, from every probe of every run.

The sweep's figure gives one answer per run; near a flat curve that answer hides how little
utilization changes over a wide range of buffers. This figure shows the curve itself: at each
buffer probed, the median of every utilization sample taken there and the band from their 10th to
their 90th percentile (the samples' own noise), the target as a line. Runs flagged invalid are drawn
too, apart (hollow markers, no line), so a curve is never hidden by the validity of its runs. With
a twin sweep, the emulated and the twin's curves are side by side on one utilization axis.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

BAND = (0.1, 0.9)  # the band's quantiles of the samples at one buffer (deciles 1 and 9 below)


def curve(results: Sequence[dict], flows: int, valid: bool) -> list[tuple[float, float, float, float]]:
    """(buffer packets, median, low, high) at each buffer probed at N = `flows` by the runs whose
    validity is `valid`, samples pooled over those runs."""
    pooled: dict[float, list[float]] = {}
    for r in results:
        if r.get("flows") != flows or bool(r.get("valid", True)) != valid:
            continue
        for p in r.get("probes") or []:
            samples = [float(s) for s in p.get("samples") or []]
            if samples:
                pooled.setdefault(float(p["buffer_packets"]), []).extend(samples)
    rows = []
    for buffer, samples in sorted(pooled.items()):
        deciles = statistics.quantiles(samples, n=10, method="inclusive") if len(samples) > 1 else [samples[0]] * 9
        rows.append((buffer, statistics.median(samples), deciles[0], deciles[-1]))
    return rows


def has_probes(results: Sequence[dict]) -> bool:
    return any(p.get("samples") for r in results for p in r.get("probes") or [])


def plot_curves(
    panels: Sequence[tuple[str, Sequence[dict]]], out: Path, title: str, flows: Sequence[int] | None = None
) -> list[Path]:
    """curves.png in `out`: one panel per (label, sweep's results), one line per N (`flows`, default
    every N of the first sweep); nothing when no sweep has probes (a result written without them)."""
    if not any(has_probes(results) for _, results in panels):
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bufsize.topologies.safefiles import save_figure

    ns = sorted(set(flows or (r["flows"] for r in panels[0][1])))
    colours = {n: plt.get_cmap("viridis")(i / max(1, len(ns) - 1) * 0.9) for i, n in enumerate(ns)}
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 5.5), sharey=True, squeeze=False)
    for ax, (label, results) in zip(axes[0], panels, strict=True):
        for n in ns:
            for valid in (True, False):
                rows = curve(results, n, valid)
                if not rows:
                    continue
                x, med, lo, hi = (list(c) for c in zip(*rows, strict=True))
                if valid:
                    ax.fill_between(x, lo, hi, color=colours[n], alpha=0.2, linewidth=0)
                    ax.plot(x, med, "o-", color=colours[n], markersize=4, label=f"N = {n}")
                else:
                    ax.errorbar(x, med, yerr=[[m - a for m, a in zip(med, lo, strict=True)],
                                              [b - m for m, b in zip(med, hi, strict=True)]],
                                fmt="o", mfc="none", color=colours[n], markersize=5, linewidth=0.8,
                                label=f"N = {n}, flagged runs")  # fmt: skip
        targets = {r.get("target") for r in results if r.get("target") is not None}
        for t in targets:
            ax.axhline(t, color="0.3", linestyle="--", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("buffer (packets)")
        ax.set_title(label, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    axes[0][0].set_ylabel(f"utilization: median, band {BAND[0]:.0%}-{BAND[1]:.0%} of the samples")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path = out / "curves.png"
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return [path]
