"""Issue 29's operating points, the line against HTB side by side in one sitting.

The same A/B machinery as bench/shaper_ab.py (bench/htb_burst_ab.py: each config once per shaper
per run, alternating which shaper goes first; resumable JSONL), on the points the issue names:
seed 004's 800 flows over 400 sender hosts at 62.5 Mb/s, 200 flows at 155 and 200 Mb/s, and 1 Gb/s
(unshaped access links) with 20 and 200 flows. Each run is a fresh `bufsize measure` of 20 s.
gt10 / gt25: busy departure gaps more than 10 / 25 % off the ideal frame time; lag p99: how far the
departures fell behind the ideal service curve of a busy link, in frames (monitors/fidelity.py).

    flock /tmp/bsz-bench.lock .venv/bin/python bench/shaper_scale.py --runs 3 --configs n800h400
    .venv/bin/python bench/shaper_scale.py --report --out bench/results/shaper-scale/rates.jsonl
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from htb_burst_ab import CONFIGS, ab_main  # noqa: E402
from shaper_ab import report as ab_report  # noqa: E402

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


def main() -> int:
    return ab_main(
        __doc__,
        {s: ["--shaper", s] for s in SHAPERS},
        "shaper",
        lambda rows: ab_report(rows, SHAPERS),
        runs=3,
        duration=20,
        configs="n800h400",
        out="bench/results/shaper-scale/n800h400.jsonl",
    )


if __name__ == "__main__":
    raise SystemExit(main())
