"""Where a committed precision-rule search spends its wall time, and the least sampling time its
precision allows (issue 30): no traffic, reads a sweep's samples.csv and result.json.

For each search: wall time split into sampling (the samples' own seconds), settling (after each
buffer change, before the first sample) and the rest (set-up, warm-up, calibration, teardown). Then
the bound: with the fit's own slope s (utilization per unit of ln buffer) and sample noise sd at
the crossing, a crossing known to +-p at confidence z needs at least n = (z sd / (s ln(1 + p)))^2
samples, all taken at the crossing with the slope known exactly. n times the sample length is the
sampling time no serial search of this noise can beat; the search's actual sampling is beside it.

    .venv/bin/python bench/search_budget.py results/full/2026-11-27 > bench/results/search-budget.md
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

Z90 = 1.645  # two-sided 90 %, the precision rule's level


def search_budget(point: Path, precision: float) -> dict | None:
    try:
        result = json.loads((point / "result.json").read_text())
        with (point / "samples.csv").open() as fh:
            rows = list(csv.DictReader(fh))
    except FileNotFoundError:
        return None
    sampling = sum(float(r["sample_s"]) for r in rows)
    settle = sum({r["measurement"]: float(r["settle_s"]) for r in rows}.values())
    length = statistics.median(float(r["sample_s"]) for r in rows)
    c = result.get("crossing") or {}
    slope, sd = c.get("slope_per_ln_buffer"), c.get("sample_sd")
    bound = math.nan
    if slope and sd and slope > 0:
        bound = (Z90 * sd / (slope * math.log(1 + precision))) ** 2 * length
    return {
        "flows": result["flows"],
        "wall": result["wall_seconds"],
        "sampling": sampling,
        "settle": settle,
        "rest": result["wall_seconds"] - sampling - settle,
        "samples": len(rows),
        "length": length,
        "bound": bound,
        "converged": result.get("converged", True) is not False and "not within" not in (result.get("note") or ""),
    }


def table(sweep: Path, precision: float) -> str:
    by_n: dict[int, list[dict]] = defaultdict(list)
    for point in sorted(sweep.glob("n*-run*")):
        if (b := search_budget(point, precision)) is not None:
            by_n[b["flows"]].append(b)

    def med(rows: list[dict], key: str) -> str:
        vals = [r[key] for r in rows if math.isfinite(r[key])]
        return f"{statistics.median(vals):.0f} [{min(vals):.0f}..{max(vals):.0f}]" if vals else "-"

    out = [
        f"# Search time budget: {sweep} (+-{precision:.0%} at 90 %)",
        "",
        "Seconds per search, median [range] over the runs. Bound: the least sampling time for the",
        "precision with the fit's slope and noise at the crossing (docstring of bench/search_budget.py).",
        "",
        "| N | searches | wall | sampling | settling | fixed | sample s | bound on sampling | sampling / bound "
        "| unconverged |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for n, rows in sorted(by_n.items()):
        ratio = [r["sampling"] / r["bound"] for r in rows if math.isfinite(r["bound"]) and r["bound"] > 0]
        rs = f"{statistics.median(ratio):.1f} [{min(ratio):.1f}..{max(ratio):.1f}]" if ratio else "-"
        unconverged = sum(not r["converged"] for r in rows)
        out.append(
            f"| {n} | {len(rows)} | {med(rows, 'wall')} | {med(rows, 'sampling')} | {med(rows, 'settle')} | "
            f"{med(rows, 'rest')} | {statistics.median(r['length'] for r in rows):.1f} | {med(rows, 'bound')} | "
            f"{rs} | {unconverged} |"
        )
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep", type=Path)
    ap.add_argument("--precision", type=float, default=0.1)
    a = ap.parse_args()
    print(table(a.sweep, a.precision), end="")


if __name__ == "__main__":
    main()
