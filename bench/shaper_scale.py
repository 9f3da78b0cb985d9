"""Issue 29's operating points, the line against HTB side by side in one sitting.

The same A/B machinery as bench/shaper_ab.py (bench/htb_burst_ab.py: each config once per shaper
per run, alternating which shaper goes first; resumable JSONL), on the points the issue names:
seed 004's 800 flows over 400 sender hosts at 62.5 Mb/s, 200 flows at 155 and 200 Mb/s, and 1 Gb/s
(unshaped access links) with 20 and 200 flows. Each run is a fresh `bufsize measure` of 20 s.
gt10 / gt25: busy departure gaps more than 10 / 25 % off the ideal frame time; lag p99: how far the
departures fell behind the ideal service curve of a busy link, in frames (monitors/fidelity.py).

    flock /tmp/bsz-bench.lock .venv/bin/python bench/shaper_scale.py --runs 3 --configs n800h400
    .venv/bin/python bench/shaper_scale.py --report
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from htb_burst_ab import CONFIGS, ab_main, med_range  # noqa: E402

SHAPERS = ["line", "htb"]
SCALE_CONFIGS = {
    # The command: the default cc (reno), 50 packets.
    "n800h400": ["--flows", "800", "--hosts", "400", "--buffer-packets", "50"],
    "155-n200": ["--rate-mbps", "155", "--flows", "200", "--hosts", "100", "--cc", "cubic", "--buffer-packets", "100"],
    "200-n200": ["--rate-mbps", "200", "--flows", "200", "--hosts", "100", "--cc", "cubic", "--buffer-packets", "100"],
    # 1 Gb/s, a BDP of buffer (7250 packets at 87 ms) so the queue rarely empties.
    "1g-n20": [
        "--rate-mbps",
        "1000",
        "--access-mbps",
        "0",
        "--flows",
        "20",
        "--hosts",
        "20",
        "--cc",
        "cubic",
        "--buffer-packets",
        "7250",
    ],  # fmt: skip
    "1g-n200": [
        "--rate-mbps",
        "1000",
        "--access-mbps",
        "0",
        "--flows",
        "200",
        "--hosts",
        "100",
        "--cc",
        "cubic",
        "--buffer-packets",
        "7250",
    ],  # fmt: skip
}
CONFIGS.update(SCALE_CONFIGS)


def report(rows: list[dict]) -> str:
    lines = [
        "| config | shaper | runs | gt10 | gt25 | lag p99 (frames) | mean rate / C | reference / C | CPU idle "
        "| valid |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in dict.fromkeys(r["config"] for r in rows):
        for shaper in SHAPERS:
            rs = [r for r in rows if r["config"] == name and r["shaper"] == shaper and "error" not in r]
            errors = sum(1 for r in rows if r["config"] == name and r["shaper"] == shaper and "error" in r)
            if not rs:
                continue
            c = rs[0]["mean_mbps"] / rs[0]["mean_over_c"]
            cells = [
                med_range([r["gt10"] for r in rs if r["gt10"] is not None]),
                med_range([r["gt25"] for r in rs if r["gt25"] is not None]),
                med_range([r["lag_p99"] for r in rs if r.get("lag_p99") is not None], "{:.1f}"),
                med_range([r["mean_over_c"] for r in rs]),
                med_range([r["ref"] / c for r in rs if r["ref"]]),
                med_range([r["idle"] for r in rs if r["idle"] is not None], "{:.2f}"),
                f"{sum(r['valid'] for r in rs)}/{len(rs)}" + (f" ({errors} failed)" if errors else ""),
            ]
            lines.append(f"| {name} | {shaper} | {len(rs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    return ab_main(
        __doc__,
        {s: ["--shaper", s] for s in SHAPERS},
        "shaper",
        report,
        runs=3,
        duration=20,
        configs="n800h400",
        out="bench/results/shaper-scale.jsonl",
    )


if __name__ == "__main__":
    raise SystemExit(main())
