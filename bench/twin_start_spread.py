"""Why a 10 Gb/s twin run needs its flows started within about an RTT (`--start-spread-s`).

2000 cubic flows over 400 hosts, 10 Gb/s, 87 ms, 1606 packets (RTT*C/sqrt(N)), started over each
spread in turn: the helper advances 0.5 simulated seconds at a time and the bench records, per step,
the wall time, the packets the bottleneck sent, its drops and the flows up. A step that takes longer
than --step-limit-s ends that run (the helper is our child, ended by its PID). Writes runs.jsonl and
README.md into --out.

    .venv/bin/python bench/twin_start_spread.py --out bench/results/twin-start-spread
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchproc import run_main  # noqa: E402

from bufsize.topologies.nssim import HELPER  # noqa: E402

ARGS = ["--flows", "2000", "--hosts", "400", "--rate-mbps", "10000", "--rtt-ms", "87", "--cc", "cubic",
        "--buffer-packets", "1606", "--access-mbps", "10000"]  # fmt: skip
STEP_S = 0.5


def read_into(stream: IO[str], into: list[str]) -> None:
    into.append(stream.readline())


def run(spread: float, steps: int, limit_s: float) -> list[dict]:
    proc = subprocess.Popen([str(HELPER), *ARGS, "--start-spread-s", repr(spread)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdin and proc.stdout
    out: list[dict] = []
    try:
        proc.stdout.readline()  # ready
        for _ in range(steps):
            t0 = time.monotonic()
            proc.stdin.write(f"run {STEP_S}\n")
            proc.stdin.flush()
            reply: list[str] = []
            reader = threading.Thread(target=read_into, args=(proc.stdout, reply), daemon=True)
            reader.start()
            reader.join(limit_s)
            wall = round(time.monotonic() - t0, 1)
            if not reply:
                out.append({"spread_s": spread, "t1": None, "wall_s": wall, "finished": False})
                break
            r = json.loads(reply[0])
            out.append({"spread_s": spread, "t1": r["t1"], "wall_s": wall, "finished": True, "packets": r["packets"],
                        "drops": r["drops"], "flows_up": r["flows_up"]})  # fmt: skip
            print(json.dumps(out[-1]), flush=True)
    finally:
        proc.kill()  # our own child, by its PID
        proc.wait()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spreads", default="1.0,0.087", help="start spreads in seconds, comma-separated")
    ap.add_argument("--steps", type=int, default=6, help="0.5 s steps per run (default 6)")
    ap.add_argument("--step-limit-s", type=float, default=300.0)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with open(a.out / "runs.jsonl", "w") as log:
        for spread in (float(s) for s in a.spreads.split(",")):
            for step in run(spread, a.steps, a.step_limit_s):
                log.write(json.dumps(step) + "\n")
                if step["finished"]:
                    rows.append(f"| {spread:g} | {step['t1'] - STEP_S:.1f}-{step['t1']:.1f} | {step['wall_s']:.1f} | "
                                f"{step['packets']} | {step['drops']} | {step['flows_up']} |")  # fmt: skip
                else:
                    rows.append(f"| {spread:g} | next {STEP_S:g} s | over {step['wall_s']:.0f} (stopped) | - | - | - |")
    (a.out / "README.md").write_text(
        "# 10 Gb/s on the twin: when the flows start (bench/twin_start_spread.py)\n\n"
        f"{time.strftime('%Y-%m-%d')}; 2000 cubic flows, 400 hosts, 10 Gb/s, 87 ms, 1606 packets, fast paths on; "
        f"each run's steps of {STEP_S:g} simulated seconds, wall seconds each, stopped at a step over "
        f"{a.step_limit_s:g} s.\n\n"
        "| start spread (s) | simulated s | wall s | packets sent | drops | flows up |\n|---|---|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n"
    )
    print((a.out / "README.md").read_text())
    return 0


if __name__ == "__main__":
    run_main(main, "stopped")
