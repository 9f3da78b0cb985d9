"""Does taking CPU from the senders' core make the low-utilization episodes? (issue 33), A against B.

bench/steal_episodes.py found the probes that read low at N >= 200 in the seconds the hypervisor
stole the most, and the steal fell mostly on CPU 0, where the senders' TCP, the switch and the
monitors run (the line shaper spins alone on the last CPU, topologies/dumbbell.py). A correlation;
this is the intervention: a thief process pinned to that CPU at real-time priority spins `--burst-ms`
every `--period-ms`, so nothing else on the CPU runs for that long, as when the hypervisor runs
another guest there. Unlike steal it does not hold off hardware interrupts or the softirqs they run
on their way out; it does hold off ksoftirqd, the senders and the monitors. Arms alternate (none,
thief, none, thief, ...), each a fixed-buffer `bufsize measure` (factor_ab.run_one); the thief runs
from before the measure starts until it ends and is ended by its PID. Its achieved duty is recorded.

    .venv/bin/python bench/induced_stalls.py --out bench/results/plateau/induced-stalls --rounds 3 \\
        -- --flows 200 --hosts 200 --cc reno --buffer-packets 16 --duration 60
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

from factor_ab import row, run_beside, run_one, spread


def thief(cpu: int, burst_s: float, period_s: float, report: Path) -> None:
    """Spin burst_s out of every period_s on `cpu` at SCHED_FIFO 1 until SIGTERM; write the duty."""
    os.sched_setaffinity(0, {cpu})
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    t0 = time.monotonic()
    spun = 0.0
    nxt = t0
    while not stop:
        nxt += period_s
        a = time.monotonic()
        while time.monotonic() - a < burst_s:
            pass
        spun += time.monotonic() - a
        time.sleep(max(0.0, nxt - time.monotonic()))
    wall = time.monotonic() - t0
    report.write_text(json.dumps({"cpu": cpu, "spun_s": round(spun, 3), "wall_s": round(wall, 3),
                                  "duty": round(spun / wall, 4) if wall else None}) + "\n")  # fmt: skip


def with_thief(out: Path, args: list[str], cpu: int, burst_s: float, period_s: float) -> dict:
    """run_one with the thief beside it (kept, with its duty, if it finished before); a thief that
    ends at once had no real-time priority here."""
    cmd = [sys.executable, __file__, "--thief", str(out / "thief.json"), "--cpu", str(cpu),
           "--burst-ms", str(burst_s * 1e3), "--period-ms", str(period_s * 1e3)]  # fmt: skip
    return run_beside("measure", out, args, cmd, "thief")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cpu", type=int, default=0, help="the thief's CPU: 0 holds the senders, the last the line")
    p.add_argument("--burst-ms", type=float, default=4.0)
    p.add_argument("--period-ms", type=float, default=40.0)
    p.add_argument("--thief", type=Path, help=argparse.SUPPRESS)  # the child's own entry
    p.add_argument("common", nargs=argparse.REMAINDER, help="-- then the options of every measure")
    a = p.parse_args()
    if not 0 < a.burst_ms < a.period_ms:
        p.error("--burst-ms must be above 0 and below --period-ms")
    if a.thief:
        thief(a.cpu, a.burst_ms / 1e3, a.period_ms / 1e3, a.thief)
        return 0
    if a.out is None:
        p.error("--out is required")
    common = [x for x in a.common if x != "--"]
    arms = ("none", "thief")
    rows: dict[str, list[dict]] = {n: [] for n in arms}
    duties: list[float] = []
    for k in range(1, a.rounds + 1):
        for arm in arms:
            print(f"[induced_stalls] round {k}: {arm}", file=sys.stderr, flush=True)
            d = a.out / f"{arm}-{k}"
            if arm == "none":
                rows[arm].append(row(run_one("measure", d, common)))
            else:
                rows[arm].append(row(with_thief(d, common, a.cpu, a.burst_ms / 1e3, a.period_ms / 1e3)))
                duties.append(json.loads((d / "thief.json").read_text())["duty"])
    keys = ["util", "util_vs_ref", "loss", "timeouts_per_retrans"]
    lines = [
        f"# {a.out.name}: {' '.join(common)}",
        "",
        f"{a.rounds} rounds, arms alternating; median [range]. The thief: {a.burst_ms:g} ms of every "
        f"{a.period_ms:g} ms on CPU {a.cpu} at SCHED_FIFO 1, achieved duty {spread(duties)}. Runs flagged "
        "invalid: " + ", ".join(f"{n} {sum(1 for r in rs if not r['valid'])}" for n, rs in rows.items()),
        "",
        "| arm | " + " | ".join(keys) + " |",
        "|---|" + "---|" * len(keys),
    ]
    for arm in arms:
        lines.append(f"| {arm} | " + " | ".join(spread([r[key] for r in rows[arm]]) for key in keys) + " |")
    (a.out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
