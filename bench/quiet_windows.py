"""What the link carried in the stretches the hypervisor left alone (2026-11-29; search samples since).

Reads one-minute `bufsize measure` runs (their rate.csv at 0.1 s, cpu.csv with each core's steal a
second, result.json), cuts the measured minute (the last whole seconds of the record, as many as
the measure's `seconds`) into windows of --window-s, and gives each window its utilization (mean
rate over the run's reference rate) and its steal (the mean over the window's seconds of the
cores' mean: the share of all CPU time, as a search sample measures it). Prints, per run, the
utilization over all windows and over those at or under each steal limit, then every run's windows
pooled by steal. This is what set monitors/cpu.SAMPLE_STEAL_LIMIT.

With --searches, reads `bufsize search` results instead (result.json, since the searches record each
sample's steal) and gives each sample its residual, its utilization less the median of the samples
kept at the same buffer: for the samples kept past the limit, those within it, and those set aside.

    .venv/bin/python bench/quiet_windows.py bench/results/halt-poll-2026-11-29/r* --window-s 2
    .venv/bin/python bench/quiet_windows.py --searches bench/results/steal-retake-ab/*
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections import defaultdict
from pathlib import Path

LIMITS = (0.002, 0.005, 0.01, 0.02)
BINS = ((0.0, 0.002), (0.002, 0.005), (0.005, 0.01), (0.01, 0.02), (0.02, 0.05), (0.05, 1.01))


def windows(run: Path, window_s: float) -> tuple[dict, list[tuple[float, float]]]:
    """The run's result and its (utilization, steal) windows over the measured minute."""
    result = json.loads((run / "result.json").read_text())
    ref = result["reference_rate_mbps"]
    seconds = round(result["points"][-1]["seconds"])
    rates = [(float(r["t_s"]), float(r["rate_mbps"])) for r in csv.DictReader((run / "rate.csv").open())]
    steal: dict[float, list[float]] = defaultdict(list)
    for r in csv.DictReader((run / "cpu.csv").open()):
        steal[float(r["t_s"])].append(float(r["steal"]))
    # The last second may be cut short by the teardown: the measured minute ends before it.
    ends = sorted(steal)[-seconds - 1 : -1]
    out = []
    t, stop = ends[0] - 1, ends[-1]
    while t + window_s <= stop + 1e-9:
        rs = [v for s, v in rates if t < s <= t + window_s]
        ss = [statistics.fmean(steal[u]) for u in ends if t < u <= t + window_s + 1e-9]
        if rs and ss:
            out.append((statistics.fmean(rs) / ref, statistics.fmean(ss)))
        t += window_s
    return result, out


def residuals(searches: list[Path], limit: float) -> None:
    groups: dict[str, list[float]] = {"kept, steal over the limit": [], "kept, within it": [], "set aside": []}
    for d in searches:
        r = json.loads((d / "result.json").read_text())
        kept: dict[int, list[tuple[float, float]]] = defaultdict(list)
        for m in r["measurements"]:
            kept[m["buffer_packets"]] += zip(m["utilization"], m.get("sample_steal") or [], strict=True)
        for m in r["measurements"]:
            med = statistics.median(u for u, _ in kept[m["buffer_packets"]])
            groups["set aside"] += [rate / r["reference_rate_mbps"] - med for rate, _ in m.get("set_aside") or []]
        for xs in kept.values():
            med = statistics.median(u for u, _ in xs)
            groups["kept, steal over the limit"] += [u - med for u, s in xs if s > limit]
            groups["kept, within it"] += [u - med for u, s in xs if s <= limit]
    print(f"| samples ({len(searches)} searches, limit {limit:.1%}) | count | residual median | 10th percentile |")
    print("|---|---|---|---|")
    for name, rs in groups.items():
        rs.sort()
        cells = f"{statistics.median(rs):+.2%} | {rs[len(rs) // 10]:+.2%}" if rs else "- | -"
        print(f"| {name} | {len(rs)} | {cells} |")


LAGS = (-2, -1, 0, 1, 2)


def lagged_correlations(run: Path) -> dict[int, float]:
    """Pearson's r between each CPU-monitor second's steal and the utilization over the same or a
    later/earlier such second (each cpu.csv row covers the second up to its stamp)."""
    result = json.loads((run / "result.json").read_text())
    rates = [(float(r["t_s"]), float(r["rate_mbps"])) for r in csv.DictReader((run / "rate.csv").open())]
    steal: dict[float, list[float]] = defaultdict(list)
    for r in csv.DictReader((run / "cpu.csv").open()):
        steal[float(r["t_s"])].append(float(r["steal"]))
    ends = sorted(steal)[-round(result["points"][-1]["seconds"]) - 1 : -1]
    u, s = [], []
    for prev, end in zip(ends[:-1], ends[1:], strict=True):
        rs = [v for t, v in rates if prev < t <= end]
        if rs:
            u.append(statistics.fmean(rs) / result["reference_rate_mbps"])
            s.append(statistics.fmean(steal[end]))
    out = {}
    for lag in LAGS:
        a, b = (s[: len(s) - lag], u[lag:]) if lag >= 0 else (s[-lag:], u[: len(u) + lag])
        if len(a) > 2 and statistics.pstdev(a) > 0 and statistics.pstdev(b) > 0:
            out[lag] = statistics.correlation(a, b)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="measure directories (search directories with --searches)")
    ap.add_argument("--window-s", type=float, default=2.0)
    ap.add_argument("--searches", action="store_true", help="the runs are searches: residuals by steal")
    ap.add_argument("--limit", type=float, default=0.005, help="the steal limit residuals are split at")
    a = ap.parse_args()
    if a.searches:
        residuals(a.runs, a.limit)
        return 0
    pooled: list[tuple[float, float]] = []
    head = " | ".join(f"<= {lim:.1%}" for lim in LIMITS)
    print(f"| run | utilization | steal | windows | {head} |")
    print("|---|---|---|---|" + "---|" * len(LIMITS))
    for run in a.runs:
        result, ws = windows(run, a.window_s)
        pooled += ws
        point = result["points"][-1]
        cells = []
        for lim in LIMITS:
            kept = [u for u, s in ws if s <= lim]
            cells.append(f"{statistics.fmean(kept):.1%} ({len(kept)})" if kept else "- (0)")
        whole = f"{point['utilization']:.1%} | {point['cpu']['steal']:.1%}"
        print(f"| {run.name} | {whole} | {len(ws)} | {' | '.join(cells)} |")
    print("\nPer second, the correlation of steal with the rate, steal leading by the lag (median [range] of runs):\n")
    print("| lag (s) | correlation |")
    print("|---|---|")
    per_run = [lagged_correlations(run) for run in a.runs]
    for lag in LAGS:
        cs = [c[lag] for c in per_run if lag in c]
        print(f"| {lag:+d} | {statistics.median(cs):+.2f} [{min(cs):+.2f}..{max(cs):+.2f}] |")
    print(f"\nEvery run's {a.window_s:g} s windows, pooled by their steal:\n")
    print("| steal | windows | utilization median | mean | 10th percentile |")
    print("|---|---|---|---|---|")
    for lo, hi in BINS:
        us = sorted(u for u, s in pooled if lo <= s < hi)
        if us:
            print(f"| {lo:.1%}-{min(hi, 1):.1%} | {len(us)} | {statistics.median(us):.1%} | "
                  f"{statistics.fmean(us):.1%} | {us[len(us) // 10]:.1%} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
