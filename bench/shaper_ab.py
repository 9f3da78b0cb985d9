"""The shapers side by side: HTB (the default) against the line (the delay line's own FIFO and clock).

Each configuration (bench/htb_burst_ab.py CONFIGS: flows / hosts / rate / buffer) runs `bufsize
measure` with each shaper in turn, alternating which goes first, so slow drifts of the machine fall
on both. gt10 / gt25: busy inter-departure gaps at the bottleneck more than 10 % / 25 % off the
ideal frame time (the same net_dev_xmit trace for both: HTB's departures leave the switch's port,
the line's leave the delay line's port toward the receiver). Resumable: each finished run is a line
of the JSONL file and is not repeated.

    .venv/bin/python bench/shaper_ab.py --runs 2 --out bench/results/shaper-ab.jsonl
    .venv/bin/python bench/shaper_ab.py --report --out bench/results/shaper-ab.jsonl
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from htb_burst_ab import ab_main, med_range  # noqa: E402

SHAPERS = ["htb", "line"]


def report(rows: list[dict], shapers: list[str] = SHAPERS) -> str:
    """Median [range] per config and shaper; with a lag column where the rows have the service-curve
    lag (bench/shaper_scale.py's rows do)."""
    lag = any(r.get("lag_p99") is not None for r in rows)
    head = ["config", "shaper", "runs", "gt10", "gt25", *(["lag p99 (frames)"] if lag else []), "mean rate / C",
            "reference / C", "slowest 1 s", "CPU idle", "valid"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for name in dict.fromkeys(r["config"] for r in rows):
        for shaper in shapers:
            rs = [r for r in rows if r["config"] == name and r["shaper"] == shaper and "error" not in r]
            if not rs:
                continue
            c = rs[0]["mean_mbps"] / rs[0]["mean_over_c"]
            cells = [
                med_range([r["gt10"] for r in rs if r["gt10"] is not None]),
                med_range([r["gt25"] for r in rs if r["gt25"] is not None]),
                *([med_range([r["lag_p99"] for r in rs if r.get("lag_p99") is not None], "{:.1f}")] if lag else []),
                med_range([r["mean_over_c"] for r in rs]),
                med_range([r["ref"] / c for r in rs if r["ref"]]),
                med_range([r["min_sec"] for r in rs], "{:.1f}"),
                med_range([r["idle"] for r in rs if r["idle"] is not None], "{:.2f}"),
                f"{sum(bool(r['valid']) for r in rs)}/{len(rs)}",
            ]
            lines.append(f"| {name} | {shaper} | {len(rs)} | " + " | ".join(cells) + " |")
    errors = [r for r in rows if "error" in r]
    if errors:
        lines.append(f"\n{len(errors)} runs failed: " + "; ".join(f"{r['config']}/{r['shaper']}" for r in errors))
    return "\n".join(lines)


def main() -> int:
    return ab_main(
        __doc__,
        {shaper: ["--shaper", shaper] for shaper in SHAPERS},
        "shaper",
        report,
        runs=2,
        duration=15,
        configs="n200,n20,n800,155mbps,200mbps",
        out="bench/results/shaper-ab.jsonl",
    )


if __name__ == "__main__":
    raise SystemExit(main())
