"""Validity under an induced background load: do the flags catch every search whose answer moved,
and spare those whose answer did not?

A hog, a process of ordinary priority pinned to CPU 0 (the senders', the switch's and the
monitors' core; the line shaper spins alone on the last one), asks for `duty` of every 20 ms
period: it spins until it has had that much CPU time in the period, then sleeps to the period's
end, so it takes what a background job of that demand would take from the senders under the
kernel's fair scheduler. Levels alternate round by round (none, then each duty, then none
again ...), so drift of the machine falls on every level alike. Each run is a whole search; its
row says whether it was valid, which flags failed, which cautions it carries, and how far its
answer lies from the median of the runs without load. Resumable: a finished run is kept.

    .venv/bin/python bench/load_ab.py --out bench/results/load-ab --rounds 3 --duties 0.1,0.25,0.5 \\
        -- --preset quick --flows 200
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path

from benchproc import run_main
from factor_ab import run_beside, run_one

PERIOD_S = 0.02


def hog(cpu: int, duty: float, report: Path) -> None:
    """Ask for `duty` of each period on `cpu` at ordinary priority until SIGTERM; write what it got."""
    os.sched_setaffinity(0, {cpu})
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    t0, c0 = time.monotonic(), time.process_time()
    nxt = t0
    while not stop:
        nxt += PERIOD_S
        want = time.process_time() + duty * PERIOD_S
        while time.process_time() < want and time.monotonic() < nxt:
            pass
        time.sleep(max(0.0, nxt - time.monotonic()))
    wall = time.monotonic() - t0
    got = time.process_time() - c0
    report.write_text(json.dumps({"cpu": cpu, "duty_asked": duty, "cpu_s": round(got, 3), "wall_s": round(wall, 3),
                                  "duty_got": round(got / wall, 4) if wall else None}) + "\n")  # fmt: skip


def with_hog(out: Path, args: list[str], duty: float) -> dict:
    """One search with the hog beside it from before it starts until it ends (kept if finished before)."""
    if duty == 0:
        return run_one("search", out, args)
    hog_argv = [sys.executable, __file__, "--hog", str(out / "hog.json"), "--duty", str(duty)]
    return run_beside("search", out, args, hog_argv, "hog")


def level_name(duty: float) -> str:
    return "none" if duty == 0 else f"hog{round(duty * 100)}"


def row(d: Path, r: dict) -> dict:
    h = json.loads((d / "hog.json").read_text()) if (d / "hog.json").exists() else {}
    return {
        "answer": r["buffer_packets"],
        "valid": bool(r.get("valid")),
        "failed": [k for k, v in r["flags"].items() if v is False],
        "cautions": [c.get("check") for c in r.get("cautions") or []],
        "duty_got": h.get("duty_got"),
        "foreign": ((r.get("monitors") or {}).get("cpu") or {}).get("foreign", {}).get("share"),
        "wall_s": r["wall_seconds"],
    }


def table(rows: dict[str, list[dict]], common: list[str], rounds: int) -> list[str]:
    base = statistics.median([r["answer"] for r in rows["none"]])
    lines = [
        f"# Induced load: bufsize search {' '.join(common)}",
        "",
        f"{rounds} rounds, levels alternating; a hog at ordinary priority on CPU 0 asking for a share of every "
        f"{PERIOD_S * 1e3:g} ms. Moved: the answer's distance from the unloaded median ({base:g} packets), in "
        "packets and as a ratio.",
        "",
        "| level | duty got | other programs' CPU share | answers | moved (ratio) | valid | flagged (failed checks) "
        "| cautioned | wall (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, rs in rows.items():
        duties = [r["duty_got"] for r in rs if r["duty_got"] is not None]
        moved = [f"{r['answer'] - base:+g} ({r['answer'] / base:.2f})" for r in rs]
        flagged = [", ".join(r["failed"]) for r in rs if not r["valid"]]
        cautioned = [", ".join(r["cautions"]) for r in rs if r["cautions"]]
        foreign = ", ".join("-" if r.get("foreign") is None else f"{r['foreign']:.3f}" for r in rs)
        lines.append(
            f"| {name} | {', '.join(f'{x:.3f}' for x in duties) or '-'} | {foreign} | "
            f"{', '.join(str(r['answer']) for r in rs)} | "
            f"{'; '.join(moved)} | {sum(r['valid'] for r in rs)}/{len(rs)} | {len(flagged)}"
            f"{' (' + '; '.join(flagged) + ')' if flagged else ''} | {len(cautioned)}"
            f"{' (' + '; '.join(cautioned) + ')' if cautioned else ''} | "
            f"{', '.join(str(round(r['wall_s'])) for r in rs)} |"
        )
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duties", default="0.1,0.25,0.5", help="the hog's shares of CPU 0, comma-separated")
    p.add_argument("--hog", type=Path, help=argparse.SUPPRESS)  # the child's own entry
    p.add_argument("--duty", type=float, help=argparse.SUPPRESS)
    p.add_argument("common", nargs=argparse.REMAINDER, help="-- then the options of every search")
    a = p.parse_args()
    if a.hog:
        hog(0, a.duty, a.hog)
        return 0
    if a.out is None:
        p.error("--out is required")
    duties = [0.0, *(float(x) for x in a.duties.split(","))]
    if not all(0 <= d < 1 for d in duties):
        p.error("--duties: shares from 0 to below 1")
    common = [x for x in a.common if x != "--"]
    rows: dict[str, list[dict]] = {level_name(d): [] for d in duties}
    t0 = time.monotonic()
    for k in range(1, a.rounds + 1):
        for duty in duties:
            d = a.out / f"{level_name(duty)}-{k}"
            print(f"[load_ab] round {k}: {level_name(duty)}", file=sys.stderr, flush=True)
            rows[level_name(duty)].append(row(d, with_hog(d, common, duty)))
    lines = table(rows, common, a.rounds)
    lines += ["", f"{sum(map(len, rows.values()))} searches in {time.monotonic() - t0:.0f} s of wall."]
    (a.out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    run_main(main, "stopped; finished searches stay, the same command resumes")
