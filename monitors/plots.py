"""PNG plots of one run directory, drawn from its CSV files (so they can be redrawn from the data alone).

rate.png, queue.png, cwnd.png (a few flows and the sum), cwnd_hist.png (the sum against a normal
fit, Appenzeller 2004 Fig 8), cpu.png and fidelity_ccdf.png (beside the 2012 emulator's numbers).
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections import Counter, defaultdict
from pathlib import Path

from bufsize.monitors.fidelity import reference_2012
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.safefiles import atomic_text, save_figure

MAX_FLOWS_DRAWN = 8


def read_csv(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def col(rows: list[dict[str, str]], name: str) -> list[float]:
    return [float(r[name]) if r[name] not in ("", "None") else math.nan for r in rows]


def _figure(plt, title: str):
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    return fig, ax


class Written(list):
    """The figures written so far, and the directory they go to."""

    def __init__(self, dest: Path) -> None:
        super().__init__()
        self.dest = dest


def _save(fig, name: str, out: Written) -> None:
    fig.tight_layout()
    save_figure(fig, out.dest / name, dpi=110)
    out.append(out.dest / name)


def hist_limit(rows: list[dict[str, str]], prefer_bytes: float | None) -> float | None:
    """The buffer limit whose cwnd-sum samples to histogram: the preferred one if sampled, else the most sampled."""
    counts = Counter(r["limit_bytes"] for r in rows if r["limit_bytes"] not in ("", "None"))
    if not counts:
        return None
    if prefer_bytes is not None and counts.get(str(int(prefer_bytes)), 0) >= 20:
        return prefer_bytes
    return float(counts.most_common(1)[0][0])


def plot_run(
    d: Path, title: str | None = None, fidelity_2012: Path | None = None, dest: Path | None = None
) -> list[Path]:
    """The monitors' figures of one run directory, each from its own CSV (a missing CSV, no figure),
    written into `dest` (default: the run directory); `fidelity_2012`, the published emulator's gap
    distribution (a TSV of the project's reference data), is drawn beside this run's where given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    result = json.loads((d / "result.json").read_text()) if (d / "result.json").exists() else {}
    nominal = result.get("nominal_rate_mbps") or result.get("config", {}).get("rate_mbps")
    head = title or f"{d.name}: {result.get('flows', '?')} flows, {result.get('cc', '')}"
    out = Written(dest or d)
    _rate_figure(plt, d, head, out, nominal)
    _queue_figure(plt, d, head, out)
    _cwnd_figures(plt, d, head, out, result.get("bdp_packets"), result.get("buffer_bytes"))
    _cpu_figure(plt, d, head, out)
    _fidelity_figure(plt, d, head, out, fidelity_2012)
    return list(out)


def _rate_figure(plt, d: Path, head: str, out: Written, nominal: float | None) -> None:  # noqa: ANN001 (pyplot)
    """rate.png: the bottleneck's rate against C."""
    rate = read_csv(d / "rate.csv")
    if rate:
        fig, ax = _figure(plt, f"{head}: bottleneck rate (10 Hz, qdisc byte counter)")
        ax.plot(col(rate, "t_s"), col(rate, "rate_mbps"), lw=0.6, label="measured")
        if nominal:
            ax.axhline(nominal, color="k", ls="--", lw=0.8, label=f"C = {nominal:g} Mb/s")
        ax.set_xlabel("time (s)")
        ax.set_ylabel("Mb/s")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
        _save(fig, "rate.png", out)
        plt.close(fig)


def _queue_figure(plt, d: Path, head: str, out: Written) -> None:  # noqa: ANN001 (pyplot)
    """queue.png: the backlog and the buffer's limit."""
    queue = read_csv(d / "queue.csv")
    if queue:
        fig, ax = _figure(plt, f"{head}: bottleneck queue (100 Hz)")
        t = col(queue, "t_s")
        ax.plot(t, col(queue, "backlog_packets"), lw=0.5, label="backlog")
        ax.step(
            t,
            [v / FRAME_BYTES for v in col(queue, "limit_bytes")],
            where="post",
            color="r",
            lw=0.8,
            label="buffer (bfifo limit)",
        )
        ax.set_xlabel("time (s)")
        ax.set_ylabel(f"packets ({FRAME_BYTES} B)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
        _save(fig, "queue.png", out)
        plt.close(fig)


def _cwnd_figures(plt, d: Path, head: str, out: Written, bdp: float | None, answer: int | None) -> None:  # noqa: ANN001 (pyplot)
    """cwnd.png (some flows' windows and their sum) and cwnd_hist.png (the sum's distribution at the answer)."""
    sums = read_csv(d / "cwnd_sum.csv")
    flows = read_csv(d / "cwnd_flows.csv")
    if sums:
        fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
        per: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for r in flows:
            per[r["flow"]].append((float(r["t_s"]), float(r["cwnd_packets"])))
        for name in sorted(per)[:MAX_FLOWS_DRAWN]:
            a1.plot(*zip(*per[name], strict=True), lw=0.7, label=name)
        a1.set_title(
            f"{head}: cwnd of {min(len(per), MAX_FLOWS_DRAWN)} of {len(per)} flows (1 Hz, tcp_probe)", fontsize=10
        )
        a1.set_ylabel("cwnd (packets)")
        a1.grid(True, alpha=0.3)
        if len(per) <= MAX_FLOWS_DRAWN:
            a1.legend(fontsize=6)
        a2.plot(col(sums, "t_s"), col(sums, "cwnd_sum_packets"), lw=0.6, label="sum of cwnd (10 Hz)")
        if bdp:
            a2.axhline(bdp, color="k", ls="--", lw=0.8, label=f"BDP {bdp:g}")
        a2.set_xlabel("time (s)")
        a2.set_ylabel("packets")
        a2.grid(True, alpha=0.3)
        a2.legend(fontsize=8)
        _save(fig, "cwnd.png", out)
        plt.close(fig)

        limit = hist_limit(sums, answer)
        sel = [float(r["cwnd_sum_packets"]) for r in sums if limit is not None and r["limit_bytes"] == str(int(limit))]
        if len(sel) >= 20 and statistics.pstdev(sel) > 0:
            mu, sd = statistics.fmean(sel), statistics.pstdev(sel)
            fig, ax = _figure(
                plt, f"{head}: sum of cwnd at buffer {limit / FRAME_BYTES:.0f} packets, {len(sel)} samples"
            )
            ax.hist(sel, bins=min(40, max(10, len(sel) // 20)), density=True, alpha=0.6, label="measured")
            xs = [mu - 4 * sd + i * sd / 25 for i in range(201)]
            ax.plot(
                xs,
                [statistics.NormalDist(mu, sd).pdf(x) for x in xs],
                "k-",
                lw=1,
                label=f"normal fit N({mu:.0f}, {sd:.0f}²)",
            )
            if bdp:
                # Below the BDP the link idles; above BDP + buffer the queue overflows (Appenzeller 2004 Fig 8).
                ax.axvline(bdp, color="g", ls="--", lw=0.8, label="BDP")
                ax.axvline(bdp + limit / FRAME_BYTES, color="r", ls="--", lw=0.8, label="BDP + buffer")
            ax.set_xlabel("sum of congestion windows (packets)")
            ax.set_ylabel("probability density")
            ax.legend(fontsize=8)
            _save(fig, "cwnd_hist.png", out)
            plt.close(fig)


def _cpu_figure(plt, d: Path, head: str, out: Written) -> None:  # noqa: ANN001 (pyplot)
    """cpu.png: busy, softirq and steal shares of each core."""
    cpu = read_csv(d / "cpu.csv")
    if cpu:
        fig, ax = _figure(plt, f"{head}: CPU per core (1 s)")
        for core in sorted({r["core"] for r in cpu}, key=int):
            rows = [r for r in cpu if r["core"] == core]
            line = ax.plot(col(rows, "t_s"), col(rows, "busy"), lw=0.8, label=f"core {core} busy")[0]
            ax.plot(
                col(rows, "t_s"),
                col(rows, "softirq"),
                lw=0.8,
                ls=":",
                color=line.get_color(),
                label=f"core {core} softirq",
            )
            if "steal" in rows[0]:  # older runs have no steal column
                ax.plot(col(rows, "t_s"), col(rows, "steal"), lw=0.8, ls="--", color=line.get_color(),
                        label=f"core {core} steal")  # fmt: skip
        ax.set_xlabel("time (s)")
        ax.set_ylabel("share of the core")
        ax.set_ylim(0, 1.05)
        ax.legend(fontsize=7, ncol=2)
        _save(fig, "cpu.png", out)
        plt.close(fig)


def _fidelity_figure(plt, d: Path, head: str, out: Written, fidelity_2012: Path | None) -> None:  # noqa: ANN001 (pyplot)
    """fidelity_ccdf.png: the departures' gaps against the ideal, beside the 2012 emulator's."""
    fid = [r for r in read_csv(d / "fidelity.csv") if r["busy"] == "1"]
    if fid:
        dev = sorted(100 * float(r["deviation"]) for r in fid)
        n = len(dev)
        fig, ax = _figure(plt, f"{head}: inter-departure gaps at the bottleneck vs ideal ({n} busy gaps)")
        ax.step(dev, [1 - i / n for i in range(n)], where="post", label="this run")
        if fidelity_2012 is not None and fidelity_2012.exists():
            for row in reference_2012(fidelity_2012):
                pts = [(p, row[f"frac_gt{p}"]) for p in (10, 25, 50, 100) if row[f"frac_gt{p}"] > 0]
                ax.plot(*zip(*pts, strict=True), "o--", ms=4, lw=0.7, label=f"2012, {row['flows']:.0f} flows")
        ax.set_xscale("symlog", linthresh=1)
        ax.set_yscale("log")
        ax.set_ylim(max(1e-4, 0.5 / n), 1.1)
        ax.set_xlabel("deviation from the ideal gap (%)")
        ax.set_ylabel("fraction of gaps with larger deviation")
        ax.legend(fontsize=8)
        _save(fig, "fidelity_ccdf.png", out)
        plt.close(fig)


def write_fidelity_csv(times: list[float], rate_mbps: float, path: Path) -> None:
    from bufsize.monitors.fidelity import IDLE_GAP_FRAMES

    ideal_us = FRAME_BYTES * 8 / rate_mbps
    with atomic_text(path) as f:
        w = csv.writer(f)
        w.writerow(["gap_us", "busy", "deviation"])
        for a, b in zip(times, times[1:], strict=False):
            g = (b - a) * 1e6
            w.writerow([round(g, 2), int(g < IDLE_GAP_FRAMES * ideal_us), round(abs(g - ideal_us) / ideal_us, 4)])
