"""How many sender hosts (issue 13, item 4): the same searches with the flows on 1, 2 or 400 hosts.

Seed 004 says the hardware's flows came from one end host and, two sentences later, that flows were
split over 400 hosts; the 2012 emulation used 2. On this 2-core machine the host count also picks the
shaper (`--shaper auto`: the line up to 100 hosts, HTB beyond), so more configurations cross
them: 2 hosts on HTB (with its default burst and with one frame), 400 hosts on the line, and
100 hosts, the most the line takes here. Each configuration is a `bufsize sweep --preset full`
directory of N = 200 and 800; the points run round-robin (every configuration's run k before any
run k+1), so a study stopped early is still balanced. Resumable: finished points are skipped.

    .venv/bin/python bench/host_count.py --out results/hosts/2026-11-25 [--runs 3] [--until 12:35]
    .venv/bin/python bench/host_count.py --out results/hosts/2026-11-25 --summary
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
from pathlib import Path

from benchproc import finish_or_tear_down, run_main

REPO = Path(__file__).resolve().parents[1]
BUFSIZE = str(REPO / ".venv" / "bin" / "bufsize")
FLOWS = (200, 800)
# (directory, sweep flags): auto gives 1, 2 and 100 hosts the line, 200-400 hosts HTB. The last one
# asks whether HTB's answer comes from its burst (ten frames by default at 62.5 Mb/s).
CONFIGS = (
    ("hosts2", ["--hosts", "2"]),
    ("hosts400", ["--hosts", "400"]),
    ("hosts1", ["--hosts", "1"]),
    ("hosts2-htb", ["--hosts", "2", "--shaper", "htb"]),
    ("hosts400-line", ["--hosts", "400", "--shaper", "line"]),
    ("hosts100", ["--hosts", "100"]),
    ("hosts2-htb-burst1", ["--hosts", "2", "--shaper", "htb", "--burst-bytes", "1514"]),
)


def run_point(out: Path, name: str, flags: list[str], n: int, run: int, runs: int) -> int:
    cmd = [BUFSIZE, "sweep", "--preset", "full", "--flows", ",".join(map(str, FLOWS)), "--runs", str(runs),
           *flags, "--out", str(out / name), "--points", f"{n}:{run}"]  # fmt: skip
    return finish_or_tear_down(cmd, capture=False).returncode


def deadline(text: str) -> datetime.datetime:
    """--until HH:MM, today."""
    try:
        t = datetime.datetime.strptime(text, "%H:%M")
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: expected HH:MM, like 12:35") from e
    return datetime.datetime.now().replace(hour=t.hour, minute=t.minute, second=0, microsecond=0)


def shaper_name(config: dict) -> str:
    burst = config.get("burst_bytes")
    return config["shaper"] + (f", burst {burst} B" if burst else "")


def summary(out: Path) -> str:
    rows = [
        "| N | hosts | shaper | answers (packets) | median | x RTT*C/sqrt(N) | loss at answer | gaps >10 % off"
        " | invalid runs |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for n in FLOWS:
        for name, _ in CONFIGS:
            found = sorted((out / name).glob(f"n{n:04d}-run*/result.json"))
            if not found:
                continue
            res = [json.loads(p.read_text()) for p in found]
            answers = [r["buffer_packets"] for r in res]
            med = statistics.median(answers)
            loss = [r["loss_rate_at_answer"] for r in res]
            gaps = [r["fidelity"]["frac_gt10"] for r in res]
            bad = [f"{p.parent.name}: " + ", ".join(k for k, v in r["flags"].items() if not v)
                   for p, r in zip(found, res, strict=True) if not r["valid"]]  # fmt: skip
            rows.append(
                f"| {n} | {res[0]['hosts']} | {shaper_name(res[0]['config'])} | {', '.join(map(str, answers))}"
                f" | {med:g}"
                f" | {med / res[0]['theory_sqrt_n_packets']:.2f} | {min(loss):.1%}..{max(loss):.1%}"
                f" | {min(gaps):.1%}..{max(gaps):.1%} | {'; '.join(bad) or '-'} |"
            )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--until", type=deadline, help="HH:MM: start no point after this local time")
    ap.add_argument("--summary", action="store_true", help="print the table of what is finished, run nothing")
    args = ap.parse_args()
    if args.summary:
        print(summary(args.out))
        return 0
    stop = args.until
    for run in range(1, args.runs + 1):
        for n in FLOWS:
            for name, flags in CONFIGS:
                if stop and datetime.datetime.now() >= stop:
                    print(f"--until {stop:%H:%M} reached before N={n} {name} run {run}", flush=True)
                    return 0
                print(f"=== {datetime.datetime.now():%H:%M:%S} N={n} {name} run {run}", flush=True)
                rc = run_point(args.out, name, flags, n, run, args.runs)
                if rc:
                    print(f"=== N={n} {name} run {run} ended with status {rc}", file=sys.stderr, flush=True)
                if rc == 2:  # bufsize refused the command line (say --runs differs): it will refuse every point
                    return 2
    return 0


if __name__ == "__main__":
    run_main(main, "stopped; finished points stay, the same command resumes")
