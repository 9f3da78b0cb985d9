"""The README's two commands on fresh clones: how long each takes, and what the test command said.

    bench/command_times.py --command test --clones 5
    bench/command_times.py --command test --clones 3 --load 0.3     # a CPU load beside each run
    bench/command_times.py --command quick --clones 3

Each clone is `git clone` of this checkout's HEAD into a directory of its own under /tmp, the command
run there as a new user would (`./setup.sh test` or `./setup.sh quick`, packages already cached on
the machine), timed whole, then removed. Nothing else should run on the machine meanwhile, except
the load this script starts with --load: a process of its own, named bsz-load-NN, busy that share of
one core (in 100 ms periods) for the whole run, ended by PID afterwards.

The summary (bench/results/command-times.json) keeps every run of the benchmark: commit, command, load,
seconds, exit status, the stages' summary lines and each claim's verdict; and per command and load the
median and range of the runs that passed. The README's two times and the Results page's table are that
median and range (buffersizing/longlived/resultspage.py). Run it again when the times move (a
command's median off the README's by a minute or more), with --fresh to start that command's runs
over; it is not run at every change.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bufsize.longlived.resultspage import TIMINGS

REPO = Path(__file__).resolve().parents[1]
COMMANDS = {"test": "./setup.sh test", "quick": "./setup.sh quick"}
PERIOD_S = 0.1
# The load: busy for its share of each period, asleep for the rest; it names itself (prctl
# PR_SET_NAME) so that a run's foreign-CPU caution says whose CPU it was.
LOAD = (
    "import ctypes, sys, time\n"
    "ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)\n"
    f"busy = float(sys.argv[2]) * {PERIOD_S}\n"
    "while True:\n"
    "    t = time.monotonic()\n"
    "    while time.monotonic() - t < busy: pass\n"
    f"    time.sleep({PERIOD_S} - busy)\n"
)
CLAIM_LINE = re.compile(r"^claim (\S+): (held|broken|inconclusive|not judged)\b(.*)$", re.M)


def head_commit() -> str:
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip


def one_clone(command: str, load: float, log_dir: Path | None) -> dict:
    """Clone, run, time and remove; the run's record."""
    where = Path(tempfile.mkdtemp(prefix="bsz-clone."))
    hog = None
    try:
        subprocess.run(["git", "clone", "--quiet", str(REPO), str(where / "repo")], check=True)
        if load > 0:
            name = f"bsz-load-{round(load * 100)}"
            hog = subprocess.Popen([sys.executable, "-c", LOAD, name, str(load)])
        t0 = time.monotonic()
        res = subprocess.run([*COMMANDS[command].split()], cwd=where / "repo", capture_output=True, text=True)
        seconds = round(time.monotonic() - t0)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
        shutil.rmtree(where, ignore_errors=True)
    out = res.stdout + res.stderr
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / f"{command}-{datetime.now(UTC):%Y%m%dT%H%M%S}.log").write_text(out)
    return {
        "commit": head_commit(),
        "command": COMMANDS[command],
        "when": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "load": f"a process busy {load:.0%} of one core (bsz-load-{round(load * 100)})" if load > 0 else "none",
        "seconds": seconds,
        "exit": res.returncode,
        "stages": stage_lines(res.stdout),
        "claims": {m.group(1): m.group(2) for m in CLAIM_LINE.finditer(out)},
        "claim_lines": [m.group(0) for m in CLAIM_LINE.finditer(out) if m.group(2) != "held"],
    }


def stage_lines(stdout: str) -> list[str]:
    """The test command's summary of its stages (tests/stage_summary.py): the indented lines after
    "test stages:" and the verdict line that ends them."""
    lines = stdout.split("\ntest stages:\n", 1)[1].splitlines() if "\ntest stages:\n" in stdout else []
    out = []
    for line in lines:
        out.append(line.strip())
        if not line.startswith("  "):
            break
    return out


def summarize(runs: list[dict]) -> dict:
    """Per command and load beside it: the median and range in whole minutes of the runs that passed, by
    the rule the README and the Results page use (resultspage.command_minutes), and how many ran. The
    README's times are the entries with nothing beside the run."""
    from bufsize.longlived.resultspage import command_minutes, loads_of

    out: dict = {}
    for load in loads_of(runs):
        for command, (med, lo, hi, n) in command_minutes(runs, load).items():
            ran = sum(r["command"] == command and r["load"] == load for r in runs)
            key = command if load == "none" else f"{command}, {load} beside it"
            out[key] = {"median_min": med, "range_min": [lo, hi], "passed": n, "runs": ran}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--command", choices=sorted(COMMANDS), required=True)
    p.add_argument("--clones", type=int, default=1)
    p.add_argument("--load", type=float, default=0.0, help="share of one core a process beside the run keeps busy")
    p.add_argument("--fresh", action="store_true", help="drop this command's earlier runs from the summary first")
    p.add_argument("--summary", type=Path, default=REPO / TIMINGS)
    p.add_argument("--logs", type=Path, help="keep each run's whole output here")
    a = p.parse_args()
    if not 0 <= a.load < 1 or a.clones < 1:
        raise SystemExit("--load must be from 0 to under 1, --clones at least 1")
    if os.geteuid() != 0:
        raise SystemExit("command_times: the commands need root")
    record = json.loads(a.summary.read_text()) if a.summary.exists() else {"runs": []}
    if a.fresh:
        record["runs"] = [r for r in record["runs"] if r["command"] != COMMANDS[a.command]]
    for i in range(a.clones):
        print(f"[{i + 1}/{a.clones}] {COMMANDS[a.command]} on a fresh clone of {head_commit()} ...", flush=True)
        run = one_clone(a.command, a.load, a.logs)
        print(f"  {run['seconds']} s, exit {run['exit']}; " + "; ".join(run["stages"][-4:]), flush=True)
        record["runs"].append(run)
        record["summary"] = summarize(record["runs"])
        record["machine"] = f"{os.cpu_count()} CPUs, {os.uname().release}"
        a.summary.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
