"""A twin sweep on Dask's LocalCluster with 1 and with 2 workers: the wall time of each, and their ratio.

Ten points (N = 20, 40, ..., 200, seed 1, the full preset's link and search rule: 62.5 Mb/s, 87 ms,
reno). A twin point is one single-threaded simulator, so with two cores two workers should take a
little over half the time of one; the gap from 2 x is the cluster's start and the points' unequal
lengths at the end. The runs alternate 1, 2, 1, 2, ... so a drift of the machine falls on both. Each
point's answer depends on (N, seed) alone, so the two worker counts must give the same answers: the
bench checks that too.

    .venv/bin/python bench/dask_workers.py > bench/results/dask-workers.md
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUFSIZE = str(Path(sys.executable).parent / "bufsize")
FLOWS = list(range(20, 201, 20))
REPEATS = 3


def sweep(workers: int, out: Path) -> tuple[float, dict[int, int]]:
    args = [BUFSIZE, "sim", "sweep", "--flows", ",".join(map(str, FLOWS)), "--seeds", "1", "--cc", "reno",
            "--workers", str(workers), "--out", str(out)]  # fmt: skip
    t = time.monotonic()
    subprocess.run(args, check=True, capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - t
    answers = {n: json.loads((out / f"n{n:04d}-run1" / "result.json").read_text())["buffer_packets"] for n in FLOWS}
    return wall, answers


def main() -> None:
    walls: dict[int, list[float]] = {1: [], 2: []}
    answers: dict[int, list[dict[int, int]]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(REPEATS):
            for workers in (1, 2):
                wall, got = sweep(workers, Path(tmp) / f"w{workers}-{i}")
                walls[workers].append(wall)
                answers[workers].append(got)
    same = all(a == answers[1][0] for a in answers[1] + answers[2])
    ratios = [one / two for one, two in zip(walls[1], walls[2], strict=True)]
    print(f"`bufsize sim sweep --flows {FLOWS[0]},...,{FLOWS[-1]} --seeds 1 --cc reno --workers K` "
          f"({len(FLOWS)} points), {REPEATS} runs a K, alternated, alone on this machine.\n")  # fmt: skip
    print("| workers | wall (s), each run | median | range |")
    print("|---|---|---|---|")
    for workers, w in walls.items():
        print(f"| {workers} | {', '.join(f'{x:.1f}' for x in w)} | {statistics.median(w):.1f} | "
              f"{min(w):.1f}-{max(w):.1f} |")  # fmt: skip
    print(f"\n1 worker / 2 workers, run by run: {', '.join(f'{r:.2f}' for r in ratios)}; median "
          f"{statistics.median(ratios):.2f} x (range {min(ratios):.2f}-{max(ratios):.2f}).")  # fmt: skip
    print(f"\nAnswers (packets) by N: {answers[1][0]}; the same in every run with either worker count: {same}.")


if __name__ == "__main__":
    main()
