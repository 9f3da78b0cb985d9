"""Does the delay line stall behind the disk? The same fixed-buffer run with the run's scratch
files (the delay line's stats, rewritten every 200 ms, and the line's status page) on ext4 and on
tmpfs, alternating.

A stall is a stretch of at least 20 ms in the queue monitor's 100 Hz trace in which the bottleneck
held frames but sent none. On this machine /run is on the root ext4, and the delay line's stats
rewrite (open, write, rename) there took up to 415 ms while a sweep wrote its results; the scratch
files now go to tmpfs (topologies/ledger.py scratch_root). Resumable: finished runs are kept.

    .venv/bin/python bench/line_stalls.py --runs 3 --out bench/results/line-stalls
    .venv/bin/python bench/line_stalls.py --scan results/hosts/2026-11-25 ...   (stalls in recorded runs)
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import time
from pathlib import Path

from benchproc import finish_or_tear_down, run_main

REPO = Path(__file__).resolve().parents[1]
BUFSIZE = str(REPO / ".venv" / "bin" / "bufsize")
MEASURE = ["--flows", "800", "--hosts", "100", "--rate-mbps", "62.5", "--rtt-ms", "87", "--cc", "reno",
           "--shaper", "line", "--buffer-packets", "449", "--duration", "30"]  # fmt: skip
ARMS = {"ext4": "/run/bufsize-scratch-ab", "tmpfs": None}  # None: the toolkit's choice (tmpfs here)


def stretches(rows: list[tuple[float, int, int]], min_s: float) -> list[tuple[float, float]]:
    """(start, length) of the stretches of at least `min_s` in which (t, sent, backlog) rows show
    frames queued and no bytes sent: the one stall rule of both stall benches."""
    found: list[tuple[float, float]] = []
    start = None
    for prev, cur in zip(rows, rows[1:], strict=False):
        if cur[1] == prev[1] and cur[2] > 0 and prev[2] > 0:
            start = prev[0] if start is None else start
        else:
            if start is not None and prev[0] - start >= min_s:
                found.append((start, prev[0] - start))
            start = None
    return found


def stalls(queue_csv: Path, min_s: float = 0.02) -> list[float]:
    """Lengths (s) of the stalls in a queue monitor's CSV."""
    with queue_csv.open() as f:
        rows = [(float(r["t_s"]), int(r["sent_bytes"]), int(r["backlog_packets"])) for r in csv.DictReader(f)]
    return [length for _, length in stretches(rows, min_s)]


def recorded_s(queue_csv: Path) -> float:
    last = "0"
    for r in csv.DictReader(queue_csv.open()):
        last = r["t_s"]
    return float(last)


def scan(dirs: list[Path]) -> str:
    """Stalls in every queue.csv under `dirs` (runs already recorded): a table per directory."""
    lines = ["| runs under | runs | recorded min | stalls | per 10 min | stalled s | longest s |", "|---" * 7 + "|"]
    for top in dirs:
        files = sorted(top.rglob("queue.csv"))
        found = [stalls(f) for f in files]
        minutes = sum(recorded_s(f) for f in files) / 60
        n = sum(len(s) for s in found)
        longest = max((max(s) for s in found if s), default=0.0)
        total = sum(sum(s) for s in found)
        per10 = 10 * n / minutes if minutes else 0.0
        lines.append(f"| {top} | {len(files)} | {minutes:.1f} | {n} | {per10:.1f} | {total:.2f} | {longest:.2f} |")
    return "\n".join(lines)


def run_one(arm: str, d: Path) -> dict:
    env = dict(os.environ)
    env.pop("BUFSIZE_SCRATCH_DIR", None)
    if ARMS[arm]:
        env["BUFSIZE_SCRATCH_DIR"] = ARMS[arm]
    t0 = time.time()
    cmd = [BUFSIZE, "measure", *MEASURE, "--out", str(d), "--json"]
    p = finish_or_tear_down(cmd, env=env)
    if not (d / "result.json").exists():
        sys.exit(f"{arm}: bufsize measure failed ({p.returncode}): {p.stderr.strip()[-400:]}")
    r = json.loads((d / "result.json").read_text())
    s = stalls(d / "queue.csv")
    row = {
        "arm": arm,
        "utilization": r.get("utilization"),
        "reference_mbps": r.get("reference_rate_mbps"),
        "loss": r.get("loss_rate"),
        "frac_gt10": (r.get("fidelity") or {}).get("frac_gt10"),
        "stalls": len(s),
        "stalled_s": round(sum(s), 3),
        "longest_stall_s": round(max(s, default=0.0), 3),
        "wall_s": round(time.time() - t0, 1),
    }
    (d / "row.json").write_text(json.dumps(row))
    return row


def spread(xs: list[float]) -> str:
    xs = [x for x in xs if x is not None]
    return f"{statistics.median(xs):.4g} [{min(xs):.4g}..{max(xs):.4g}]" if xs else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per arm (alternating)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--scan", type=Path, nargs="+", help="only count stalls in the runs recorded under these")
    a = ap.parse_args()
    if a.scan:
        print(scan(a.scan))
        return
    if a.out is None:
        ap.error("give --out (or --scan)")
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(1, a.runs + 1):
        for arm in ARMS:
            d = a.out / f"{arm}-{i}"
            if (d / "row.json").exists():
                rows.append(json.loads((d / "row.json").read_text()))
                continue
            rows.append(run_one(arm, d))
            print(json.dumps(rows[-1]), flush=True)
    keys = ["utilization", "reference_mbps", "loss", "frac_gt10", "stalls", "stalled_s", "longest_stall_s"]
    lines = ["| scratch files on | runs | " + " | ".join(keys) + " |", "|---" * (len(keys) + 2) + "|"]
    for arm in ARMS:
        mine = [r for r in rows if r["arm"] == arm]
        lines.append(f"| {arm} | {len(mine)} | " + " | ".join(spread([r[k] for r in mine]) for k in keys) + " |")
    (a.out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    run_main(main, "stopped; the rows written so far stay")
