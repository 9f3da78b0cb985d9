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

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from htb_burst_ab import measure_run, med_range  # noqa: E402

SHAPERS = ["htb", "line"]


def report(rows: list[dict]) -> str:
    lines = [
        "| config | shaper | runs | gt10 | gt25 | mean rate / C | reference / C | slowest 1 s | CPU idle | valid |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in dict.fromkeys(r["config"] for r in rows):
        for shaper in SHAPERS:
            rs = [r for r in rows if r["config"] == name and r["shaper"] == shaper and "error" not in r]
            if not rs:
                continue
            c = rs[0]["mean_mbps"] / rs[0]["mean_over_c"]
            cells = [
                med_range([r["gt10"] for r in rs]),
                med_range([r["gt25"] for r in rs]),
                med_range([r["mean_over_c"] for r in rs]),
                med_range([r["ref"] / c for r in rs]),
                med_range([r["min_sec"] for r in rs], "{:.1f}"),
                med_range([r["idle"] for r in rs], "{:.2f}"),
                f"{sum(bool(r['valid']) for r in rs)}/{len(rs)}",
            ]
            lines.append(f"| {name} | {shaper} | {len(rs)} | " + " | ".join(cells) + " |")
    errors = [r for r in rows if "error" in r]
    if errors:
        lines.append(f"\n{len(errors)} runs failed: " + "; ".join(f"{r['config']}/{r['shaper']}" for r in errors))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--duration", type=float, default=15)
    ap.add_argument("--configs", default="n200,n20,n800,155mbps,200mbps")
    ap.add_argument("--out", default="bench/results/shaper-ab.jsonl")
    ap.add_argument("--report", action="store_true", help="print the table of what --out holds and exit")
    a = ap.parse_args()
    if a.report:
        print(report([json.loads(line) for line in Path(a.out).read_text().splitlines()]))
        return 0
    if os.geteuid() != 0:
        sys.exit("run as root")
    out = Path(a.out)
    done = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    seen = {(r["config"], r["shaper"], r["run"]) for r in done}
    for run in range(1, a.runs + 1):
        for name in a.configs.split(","):
            for shaper in SHAPERS if run % 2 else SHAPERS[::-1]:
                if (name, shaper, run) in seen:
                    continue
                row = {"run": run, "shaper": shaper, **measure_run(name, ["--shaper", shaper], a.duration)}
                with out.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
