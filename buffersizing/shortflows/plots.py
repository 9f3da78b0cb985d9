"""Plots of a `bufsize shortflows` directory, from its files alone (transfers.csv, result.json):
fct.png, completion time against transfer length; queue_ccdf.png, P(Q >= b) on a log axis
beside the burst model's exp(-kappa b) (F11)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from bufsize.shortflows.stats import size_packets
from bufsize.topologies.safefiles import save_figure as write_figure


def pyplot():  # noqa: ANN201 - matplotlib's module, imported only when a figure is drawn
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def finish_axes(ax, xlabel: str, ylabel: str, title: str | None = None, xlog: bool = True) -> None:  # noqa: ANN001
    """Log x axis (unless xlog is false), labels, grid and legend, as every short-flow figure has them."""
    if xlog:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)


def save_figure(fig, path: Path) -> None:  # noqa: ANN001
    import matplotlib.pyplot as plt

    fig.tight_layout()
    write_figure(fig, path, dpi=120)
    plt.close(fig)


def plot_shortflows(d: Path, dest: Path | None = None) -> list[Path]:
    """The short flows' figures of one run, written into `dest` (default: the run directory)."""
    dest = dest or d
    plt = pyplot()
    result = json.loads((d / "result.json").read_text())
    with (d / "transfers.csv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["status"] == "done" and r["in_window"] == "1"]
    rtt = max(result["config"]["rtt_ms"]) / 1000
    head = (f"{d.name}: {result['workload']['sizes']}, load {result['workload']['load']:g}, "
            f"{result['workload']['users']} users, {result['long_flows']} long flows, "
            f"buffer {result['buffer_packets']:g} packets")  # fmt: skip
    written: list[Path] = []
    if rows:
        fig, ax = plt.subplots(figsize=(8, 4))
        x = [size_packets(int(r["size_bytes"])) for r in rows]
        y = [float(r["fct_s"]) * 1e3 for r in rows]
        ax.scatter(x, y, s=3, alpha=0.3, label="transfers")
        for b in result["fct_by_size"]:
            mid = math.sqrt(b["packets_lo"] * b["packets_hi"])
            ax.plot([mid], [b["median_s"] * 1e3], "ko", ms=4)
            ax.plot([mid], [b["p95_s"] * 1e3], "r^", ms=4)
        ax.plot([], [], "ko", label="median")
        ax.plot([], [], "r^", label="p95")
        ax.axhline(rtt * 1e3, color="grey", ls="--", lw=0.8, label=f"RTT {rtt * 1e3:g} ms")
        ax.set_yscale("log")
        finish_axes(ax, "transfer length (packets)", "completion time (ms)", head)
        save_figure(fig, dest / "fct.png")
        written.append(dest / "fct.png")
    ccdf = [(b, p) for b, p in result["queue_ccdf"] if p > 0]
    if len(ccdf) > 1:
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.step([b for b, _ in ccdf], [p for _, p in ccdf], where="post", label="measured (100 Hz samples)")
        m = result.get("model", {})
        if m.get("available"):
            bs = [b for b, _ in ccdf]
            label = f"F11: exp(-{m['kappa_f11']:.3g} b), IW {m['initial_window']}, load {m['load']:.2f}"
            ax.plot(bs, [math.exp(-m["kappa_f11"] * b) for b in bs], "k--", lw=0.8, label=label)
        ax.set_yscale("log")
        ax.set_ylim(bottom=max(1e-5, min(p for _, p in ccdf) / 2))
        finish_axes(ax, "queue b (full-size packets: backlog bytes / 1514)", "P(Q >= b)", head, xlog=False)
        save_figure(fig, dest / "queue_ccdf.png")
        written.append(dest / "queue_ccdf.png")
    return written
