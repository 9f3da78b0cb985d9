"""The twin's CUBIC against Linux's, one part at a time: which part of ns-3's TcpCubic makes the
twin need more buffer than the emulated Linux CUBIC at few flows?

Each row turns one part of ns-3 3.44's TcpCubic off, or matches it to Linux's, through an ns-3
attribute default (`bufsize sim search --ns3-attribute`): HyStart, fast convergence, the
TCP-friendly region, and CubicDelta (ns-3 waits this long after a window reduction before the
cubic function governs growth again; Linux has no such wait). One row changes the receiver's ACKs
instead (every segment ACKed at once), the one factor that moved the twin's Reno answer. The link
and rule are the published figures' (62.5 Mb/s, 87 ms, the precision rule at +-10 %), N = 2 and 10,
seeds 1-3, so that each row compares with the emulated Linux CUBIC's committed full sweep at the same N.

    .venv/bin/python bench/twin_cubic_factors.py > bench/results/twin-cubic-factors.md
"""

from __future__ import annotations

import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from twin_n100_factors import search

SEEDS = (1, 2, 3)
FLOWS = (2, 10)
CUBIC = "ns3::TcpCubic::"
FACTORS: list[tuple[str, list[str]]] = [
    ("ns-3's TcpCubic as the twin runs it", []),
    ("HyStart off", ["--ns3-attribute", CUBIC + "HyStart=false"]),
    ("fast convergence off", ["--ns3-attribute", CUBIC + "FastConvergence=false"]),
    ("TCP-friendly region off", ["--ns3-attribute", CUBIC + "TcpFriendliness=false"]),
    ("no wait after a reduction (CubicDelta 0, as Linux)", ["--ns3-attribute", CUBIC + "CubicDelta=0ms"]),
    ("every segment ACKed at once", ["--delayed-ack", "off"]),
]


def main() -> None:
    t0 = time.monotonic()
    jobs = [(i, n, seed) for i in range(len(FACTORS)) for n in FLOWS for seed in SEEDS]
    base = {n: ["sim", "search", "--flows", str(n), "--cc", "cubic", "--json"] for n in FLOWS}

    def one(job: tuple[int, int, int], tmp: Path) -> tuple[dict, float]:
        i, n, seed = job
        return search(FACTORS[i][1], seed, tmp / f"f{i}-n{n}-s{seed}", base[n])

    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(2) as pool:  # one simulator a core
        done = list(pool.map(lambda j: one(j, Path(tmp)), jobs))
    got = dict(zip(jobs, done, strict=True))
    print("| factor | options | " + " | ".join(f"N = {n}: answers, seeds 1-3 (median)" for n in FLOWS)
          + " | wall a search (s) |")  # fmt: skip
    print("|---|---|" + "---|" * len(FLOWS) + "---|")
    for i, (name, args) in enumerate(FACTORS):
        cells = []
        for n in FLOWS:
            answers = [got[(i, n, s)][0]["buffer_packets"] for s in SEEDS]
            cells.append(f"{', '.join(map(str, answers))} ({statistics.median(answers):g})")
        walls = [got[(i, n, s)][1] for n in FLOWS for s in SEEDS]
        print(f"| {name} | `{' '.join(args) or '-'}` | {' | '.join(cells)} | {min(walls):.0f}-{max(walls):.0f} |")
    print(f"\n{len(jobs)} searches, two at a time, in {time.monotonic() - t0:.0f} s of wall.")


if __name__ == "__main__":
    main()
