"""How synchronized the flows' windows were at one buffer, from a run's own traces (issue 33, item 4).

The sqrt(N) rule rests on desynchronized flows: the sum of N independent windows varies as sqrt(N)
times one window's variation, where N windows that rise and fall together vary N times as much.
This reads a run's cwnd_flows.csv (every flow's window once a second) and cwnd_sum.csv (the buffer
in force, 10 Hz), keeps the snapshots taken while the buffer was `--buffer-packets` (or the run's
own, for `bufsize measure`), drops the first `--skip-s` of them (the settle), and reports

    index = sd over time of the summed window / sqrt(sum over flows of each window's variance)

about 1 for independent flows and sqrt(N) when every window moves in step; beside it the queue's
share of time empty and its coefficient of variation from queue.csv at the same buffer. No traffic:
it reads the files a run wrote.

    .venv/bin/python bench/sync_index.py bench/results/plateau/sync-n200-b256/*/
"""

from __future__ import annotations

import argparse
import bisect
import csv
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

from bufsize.topologies import FRAME_BYTES


def limits_at(run: Path) -> tuple[list[float], list[int]]:
    """The buffer in force (bytes) over time, from cwnd_sum.csv."""
    times, limits = [], []
    with (run / "cwnd_sum.csv").open() as f:
        for row in csv.DictReader(f):
            times.append(float(row["t_s"]))
            limits.append(int(row["limit_bytes"]))
    return times, limits


def in_force(times: list[float], limits: list[int], t: float) -> int | None:
    i = bisect.bisect_right(times, t) - 1
    return limits[i] if i >= 0 else None


def sync_index(run: Path, buffer_bytes: int, skip_s: float) -> dict:
    times, limits = limits_at(run)
    snaps: dict[float, dict[str, int]] = defaultdict(dict)
    with (run / "cwnd_flows.csv").open() as f:
        for row in csv.DictReader(f):
            t = float(row["t_s"])
            if in_force(times, limits, t) == buffer_bytes:
                snaps[t][row["flow"]] = int(row["cwnd_packets"])
    start = min(snaps, default=0.0) + skip_s
    kept = {t: w for t, w in snaps.items() if t >= start}
    flows = set.intersection(*(set(w) for w in kept.values())) if kept else set()
    if len(kept) < 5 or not flows:
        raise SystemExit(f"{run}: fewer than 5 snapshots at {buffer_bytes} bytes with every flow in them")
    series = {fl: [w[fl] for w in kept.values()] for fl in flows}
    total = [sum(w[fl] for fl in flows) for w in kept.values()]
    var_sum = sum(statistics.pvariance(s) for s in series.values())
    queue = []
    with (run / "queue.csv").open() as f:
        for row in csv.DictReader(f):
            if float(row["t_s"]) >= start and int(row["limit_bytes"]) == buffer_bytes:
                queue.append(int(row["backlog_packets"]))
    mean_q = statistics.fmean(queue) if queue else None
    return {
        "run": run.name,
        "flows": len(flows),
        "snapshots": len(kept),
        "index": statistics.pstdev(total) / math.sqrt(var_sum) if var_sum else None,
        "index_if_in_step": math.sqrt(len(flows)),
        "mean_window": statistics.fmean(total) / len(flows),
        "queue_empty": sum(q == 0 for q in queue) / len(queue) if queue else None,
        "queue_cv": statistics.pstdev(queue) / mean_q if mean_q else None,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--buffer-packets", type=int, help="default: the run's own (result.json's buffer)")
    p.add_argument("--skip-s", type=float, default=5.0)
    a = p.parse_args()
    print("| run | flows | snapshots | index | index if in step | mean window | queue empty | queue CV |")
    print("|---|---|---|---|---|---|---|---|")
    for run in a.runs:
        packets = a.buffer_packets or json.loads((run / "result.json").read_text())["points"][0]["buffer_packets"]
        r = sync_index(run, int(packets * FRAME_BYTES), a.skip_s)
        print(
            f"| {r['run']} | {r['flows']} | {r['snapshots']} | {r['index']:.2f} | {r['index_if_in_step']:.1f} | "
            f"{r['mean_window']:.2f} | {r['queue_empty']:.3f} | {r['queue_cv']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
