"""Soak: a sweep under random faults, resumed until every point is finished (issue 32, item 7).

A real `bufsize sweep` (short searches, so many points fit in the time) runs with its --out on a
tmpfs of its own. At random moments one fault is injected:
- line: SIGKILL to the run's delay line (the line shaper) — found in the run's ledger;
- iperf: SIGKILL to one of the run's iperf clients;
- sigint / sigterm: to the sweep itself (as Ctrl-C, or a scheduler stopping it);
- diskfull: the tmpfs is filled to the last byte for a few seconds, then freed.
Whenever the sweep exits, the same command is run again (a sweep resumes its own points) until
every point is finished; faults stop after --minutes, so the last resumes run undisturbed.
At the end and after every exit the checks are: each
finished point's result.json is a whole search of its N; no temporary files are left in --out;
nothing of a run is left on the machine (the toolkit's own leftovers check). Only processes this
soak started (the sweep, and through its ledger the sweep's own children) are signalled.

    flock /tmp/bsz-bench.lock .venv/bin/python bench/soak.py --minutes 30 --out bench/results/soak
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bufsize.scaffold.resultdir import read_finished  # noqa: E402
from bufsize.topologies.cleanup import find_leftovers  # noqa: E402
from bufsize.topologies.ledger import STATE_DIR  # noqa: E402
from bufsize.topologies.proc import is_same_process  # noqa: E402

BUFSIZE = str(REPO / ".venv" / "bin" / "bufsize")
FLOWS = [2, 4, 8]
SWEEP = ["sweep", "--flows", ",".join(map(str, FLOWS)), "--rate-mbps", "20", "--rtt-ms", "20", "--cc", "cubic",
         "--samples", "3", "--settle-s", "1", "--sample-s", "1", "--resolution", "0.25",
         "--fidelity-s", "0"]  # fmt: skip
FAULTS = ["line", "iperf", "sigint", "sigterm", "diskfull"]
TMPFS_MB = 64


def ledger_processes(owner: int) -> list[dict]:
    """The processes the ledgers of `owner`'s runs list (the sweep's own children)."""
    procs = []
    for p in STATE_DIR.glob("run-*.json"):
        try:
            st = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(st, dict) and st.get("owner_pid") == owner:
            procs += [x for x in st.get("processes", []) if isinstance(x, dict)]
    return procs


def kill_child(owner: int, prefix: str) -> str:
    """SIGKILL one live process of `owner`'s run whose label starts with `prefix`."""
    cands = [p for p in ledger_processes(owner) if str(p.get("what", "")).startswith(prefix)]
    cands = [p for p in cands if is_same_process(p["pid"], p.get("start"))]
    if not cands:
        return "nothing to kill (between points)"
    p = random.choice(cands)
    os.kill(p["pid"], signal.SIGKILL)
    return f"killed {p['what']} (pid {p['pid']})"


def fill(mount: Path, hold_s: float) -> str:
    """Fill the tmpfs to the last byte, hold, free."""
    filler = mount / ".soak-filler"
    written = 0
    try:
        with filler.open("wb") as f:
            chunk = b"\0" * (1 << 20)
            while True:
                try:
                    f.write(chunk)
                    f.flush()
                    written += len(chunk)
                except OSError:
                    break
        time.sleep(hold_s)
    finally:
        filler.unlink(missing_ok=True)
    return f"filled {written >> 20} MB for {hold_s:.0f} s"


def check(out: Path) -> dict:
    finished, broken = [], []
    for d in sorted(out.glob("n*-run*")):
        r = read_finished(d / "result.json")
        if (d / "result.json").exists() and (r is None or "buffer_packets" not in r):
            broken.append(d.name)
        elif r is not None:
            finished.append(d.name)
    temps = [str(p.relative_to(out)) for p in out.rglob("*.tmp")]
    return {"finished": finished, "broken": broken, "temporary_files": temps, "leftovers": find_leftovers()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--runs", type=int, default=3, help="searches per N")
    ap.add_argument("--mean-gap-s", type=float, default=40, help="mean time between faults")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="bench/results/soak")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root")
    random.seed(a.seed)
    record = Path(a.out)
    record.mkdir(parents=True, exist_ok=True)
    mount = Path(tempfile.mkdtemp(prefix="bsz-soak-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_MB}m,mode=0755", "tmpfs", str(mount)], check=True)
    out = mount / "sweep"
    t0 = time.monotonic()
    deadline = t0 + a.minutes * 60
    faults: list[dict] = []
    exits: list[dict] = []
    hard_stop = deadline + 20 * 60  # faults stop at the deadline; the last resume may finish then
    try:
        while time.monotonic() < hard_stop:
            argv = [BUFSIZE, *SWEEP, "--runs", str(a.runs), "--out", str(out)]
            log = (record / "sweep.log").open("a")
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
            next_fault = time.monotonic() + random.expovariate(1 / a.mean_gap_s)
            while proc.poll() is None and time.monotonic() < hard_stop:
                time.sleep(0.2)
                if time.monotonic() < next_fault or time.monotonic() >= deadline:
                    continue
                kind = random.choice(FAULTS)
                at = round(time.monotonic() - t0, 1)
                if kind == "line":
                    what = kill_child(proc.pid, "delay line")
                elif kind == "iperf":
                    what = kill_child(proc.pid, "iperf client")
                elif kind in ("sigint", "sigterm"):
                    proc.send_signal(signal.SIGINT if kind == "sigint" else signal.SIGTERM)
                    what = f"sent {kind.upper()} to the sweep"
                else:
                    what = fill(mount, random.uniform(2, 8))
                faults.append({"t_s": at, "fault": kind, "what": what})
                print(f"[{at:7.1f} s] {kind}: {what}", flush=True)
                next_fault = time.monotonic() + random.expovariate(1 / a.mean_gap_s)
            if proc.poll() is None:  # past the hard stop: stop it as a user would
                proc.send_signal(signal.SIGINT)
                proc.wait(timeout=300)
            log.close()
            state = check(out)
            exits.append({"t_s": round(time.monotonic() - t0, 1), "rc": proc.returncode, **state})
            print(f"sweep exited rc {proc.returncode}: {len(state['finished'])} finished, "
                  f"broken {state['broken']}, temporary files {state['temporary_files']}, "
                  f"leftovers {state['leftovers']}", flush=True)  # fmt: skip
            if proc.returncode == 0 and len(state["finished"]) == len(FLOWS) * a.runs:
                break
    finally:
        final = check(out) if out.exists() else {}
        subprocess.run(["umount", str(mount)], check=False)
        mount.rmdir()
    summary = {
        "minutes": round((time.monotonic() - t0) / 60, 1),
        "sweep": SWEEP + ["--runs", str(a.runs)],
        "seed": a.seed,
        "faults": faults,
        "exits": exits,
        "final": final,
        "points_expected": len(FLOWS) * a.runs,
        "commit": subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
    }
    (record / "soak.json").write_text(json.dumps(summary, indent=1) + "\n")
    tally: dict[str, int] = {}
    for f in faults:
        tally[f["fault"]] = tally.get(f["fault"], 0) + 1
    print(json.dumps({"tally": tally, "sweeps": len(exits), "final": final}, indent=1))
    ok = final.get("finished") and len(final["finished"]) == summary["points_expected"] and not final["broken"]
    return 0 if ok and not final["temporary_files"] and not any(e["leftovers"] for e in exits) else 1


if __name__ == "__main__":
    raise SystemExit(main())
