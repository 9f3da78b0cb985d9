"""What the twin's fast paths buy: the same simulation with `--fast-paths 0` and `1`, timed.

The helper's fast paths (topologies/nssim: the strong end-system model on the router, routes from a
hash table, an endpoint cache on the receiver) remove per-packet walks over every host and flow.
For each scale below the helper runs the same script both ways, `--rounds` times alternating, and
the bench records each run's wall time and whether its output equals the other way's, line for line
(it must: tests/test_sim_twin.py checks the same on a small run). Writes runs.jsonl and README.md
(median [range] of the rounds) into --out.

    .venv/bin/python bench/twin_fast_paths.py --rounds 3 --out bench/results/twin-fast-paths
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchproc import run_main  # noqa: E402

from bufsize.topologies.nssim import HELPER  # noqa: E402

# (name, helper arguments, simulated seconds): the presets' scale (62.5 Mb/s, 800 flows, 400 hosts)
# and the 1 Gb/s point of docs/twin.md (2000 flows), each from its start.
SCALES = [
    ("62.5 Mb/s, 800 reno flows, 400 hosts, 87 ms, 40 packets",
     ["--flows", "800", "--hosts", "400", "--rate-mbps", "62.5", "--rtt-ms", "87", "--cc", "reno",
      "--buffer-packets", "40"], 10.0),
    ("1 Gb/s, 2000 cubic flows, 400 hosts, 87 ms, 200 packets, 10 Gb/s access",
     ["--flows", "2000", "--hosts", "400", "--rate-mbps", "1000", "--rtt-ms", "87", "--cc", "cubic",
      "--buffer-packets", "200", "--access-mbps", "10000"], 3.0),
]  # fmt: skip


def one(args: list[str], seconds: float, fast: int) -> dict:
    script = f"run {seconds!r}\nstatus\nquit\n"
    t0 = time.monotonic()
    res = subprocess.run([str(HELPER), *args, "--fast-paths", str(fast)], input=script, capture_output=True,
                         text=True, check=True)  # fmt: skip
    wall = time.monotonic() - t0
    last = json.loads(res.stdout.splitlines()[1])
    return {"fast_paths": fast, "wall_s": round(wall, 2), "output_sha1": hashlib.sha1(res.stdout.encode()).hexdigest(),
            "packets": last["packets"], "drops": last["drops"]}  # fmt: skip


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.1f} [{min(xs):.1f}-{max(xs):.1f}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--note", default="nothing else running", help="what else the machine ran, for README.md")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with open(a.out / "runs.jsonl", "w") as log:
        for name, args, seconds in SCALES:
            runs: list[dict] = []
            for r in range(a.rounds):
                for fast in (0, 1) if r % 2 == 0 else (1, 0):
                    run = one(args, seconds, fast) | {"scale": name, "round": r + 1, "simulated_s": seconds}
                    print(json.dumps(run), flush=True)
                    log.write(json.dumps(run) + "\n")
                    runs.append(run)
            off = [x["wall_s"] for x in runs if x["fast_paths"] == 0]
            on = [x["wall_s"] for x in runs if x["fast_paths"] == 1]
            same = len({x["output_sha1"] for x in runs}) == 1
            ratio = [o / f for o, f in zip(sorted(off), sorted(on), strict=True)]
            rows.append(f"| {name} | {seconds:g} | {runs[0]['packets']} | {spread(off)} | {spread(on)} | "
                        f"{statistics.median(off) / statistics.median(on):.2f} ({min(ratio):.2f}-{max(ratio):.2f}) | "
                        f"{'yes' if same else 'NO'} |")  # fmt: skip
    (a.out / "README.md").write_text(
        "# The twin's fast paths, timed (bench/twin_fast_paths.py)\n\n"
        f"{a.rounds} rounds alternating, {time.strftime('%Y-%m-%d')}, one run at a time on this 2-core machine "
        f"({a.note}); "
        "wall seconds, median [range]; the speed-up is the ratio of the medians (in brackets: of the runs "
        "paired by rank). Same output: every line the helper printed, both ways, all rounds.\n\n"
        "| scale | simulated s | packets on the bottleneck | fast paths off | on | speed-up | same output |\n"
        "|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n"
    )
    print((a.out / "README.md").read_text())
    return 0


if __name__ == "__main__":
    run_main(main, "stopped")
