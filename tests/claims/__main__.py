"""Runs the claims' scenarios one run at a time, alone on the machine, and prints one line a claim.

Each run is measured once; a run that the instrument says was disturbed from outside (its cautions
name the hypervisor's steal or other programs' CPU) is measured once more, never a third time. So
the stage takes at most twice the time of its runs (--list gives each scenario's time alone).
Exit status: 1 when a claim is broken (or, with --fault, when a claim the fault must break was not),
else 0. An inconclusive claim does not fail the stage, and never counts as held.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from claims.faults import FAULTS
from claims.scenarios import FAULTS_BREAK, SCENARIOS, Command, Scenario
from claims.verdict import BROKEN, Run, Verdict, judge, measure_twice, summary

TESTS = Path(__file__).resolve().parents[1]
VM_CLAIM = "BSZ-CLAIM "  # the guest prints each claim's figures on such a line (tests/test_netem_vm.py)


def say(text: str) -> None:
    print(text, flush=True)


def record_of(stdout: str, out: Path) -> dict:
    """The run's result as it printed it (--json); `bufsize verify`'s summary has no flags: valid
    unless the delay line dropped frames, the one fault of its own it reports."""
    data = json.loads(stdout)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if "per_host" in data and "valid" not in data:
        data["flags"] = {"no_delay_line_drops": data.get("delayline_drops", 0) == 0}
        data["valid"] = all(data["flags"].values())
    data["_dir"] = str(out)
    return data


def execute_vm(cmd: Command, fault: str | None) -> Run:
    """The VM stage's claim tests; the host's CPU measured around them, as every run's is (the guest
    cannot see the host's steal or its other programs)."""
    from bufsize.monitors.cpu import CpuMonitor, ForeignCpu
    from bufsize.scaffold.cautions import cautions

    env = os.environ | {"BSZ_VM_PART": "claims", "BSZ_VM_OVS": "auto"} | ({"BSZ_VM_FAULT": fault} if fault else {})
    say(f"  {cmd.name}: tests/vm/stage.sh, the tests marked claim (about {cmd.seconds:.0f} s)")
    t0 = time.monotonic()
    cpu, foreign = CpuMonitor().start(), ForeignCpu()  # the stage and its guest are this process's children
    try:
        res = subprocess.run([str(TESTS / "vm" / "stage.sh")], capture_output=True, text=True, timeout=cmd.timeout,
                             env=env)  # fmt: skip
    except subprocess.TimeoutExpired:
        return Run(cmd.name, error=f"still running after {cmd.timeout:.0f} s", seconds=time.monotonic() - t0)
    share = cpu.stop()
    machine = {"mean_steal_share": round(share.steal, 4), "foreign": foreign.result()}
    lines = res.stdout.splitlines()
    end = next((x for x in reversed(lines) if x.startswith(("PASS: ", "FAIL: ", "SKIP: "))), "no closing line")
    if end.startswith("SKIP: "):
        return Run(cmd.name, error=end, seconds=time.monotonic() - t0, skipped=True)
    claims = {d["claim"]: d for d in (json.loads(x[len(VM_CLAIM) :]) for x in lines if x.startswith(VM_CLAIM))}
    flags = {"guest_tests_passed": res.returncode == 0}
    data = {"valid": all(flags.values()), "flags": flags, "cautions": cautions({"cpu": machine}),
            "monitors": {"cpu": machine}, "claims": claims, "stage": end}  # fmt: skip
    run = Run(cmd.name, data, seconds=time.monotonic() - t0)
    if res.returncode != 0 and not claims:
        run.error = end
    say(f"    {run.seconds:.0f} s: {end}; cautions: {', '.join(c['check'] for c in data['cautions']) or 'none'}")
    return run


def execute(cmd: Command, attempt: int, work: Path, fault: str | None) -> Run:
    if cmd.vm:
        return execute_vm(cmd, fault)
    out = work / (cmd.name if attempt == 1 else f"{cmd.name}-again")
    launch = [sys.executable, "-m", "claims.launch", *(["--fault", fault] if fault else []), "--"]
    argv = [*launch, *cmd.argv, "--json", "--out", str(out)]
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}
    say(f"  {cmd.name}{' (again)' if attempt > 1 else ''}: bufsize {' '.join(cmd.argv)} (about {cmd.seconds:.0f} s)")
    t0 = time.monotonic()
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=cmd.timeout, env=env)
    except subprocess.TimeoutExpired:
        return Run(cmd.name, error=f"still running after {cmd.timeout:.0f} s", seconds=time.monotonic() - t0)
    took = time.monotonic() - t0
    try:
        data = record_of(res.stdout, out)
    except ValueError:
        tail = (res.stderr.strip().splitlines() or ["no output"])[-1]
        return Run(cmd.name, error=f"exit {res.returncode}: {tail}", seconds=took)
    if res.returncode not in (0, 1, 3):
        return Run(cmd.name, data, error=f"exit {res.returncode}: {res.stderr.strip()[-300:]}", seconds=took)
    run = Run(cmd.name, data, seconds=took)
    state = "valid" if run.valid else f"FLAGGED {', '.join(run.failed_flags)}"
    cautions = ", ".join(c["check"] for c in data.get("cautions") or []) or "none"
    say(f"    {took:.0f} s: {state}; cautions: {cautions}")
    return run


def run_scenario(sc: Scenario, work: Path, fault: str | None) -> list[Verdict]:
    say(f"scenario {sc.name}: {sc.says}")
    attempts = {c.name: measure_twice(lambda k, c=c: execute(c, k, work, fault), say) for c in sc.commands}
    return [judge(claim, attempts) for claim in sc.claims]


def chosen(only: str | None, fault: str | None) -> list[Scenario]:
    names = {s.name for s in SCENARIOS}
    if only:
        wanted = set(only.split(","))
        unknown = wanted - names
        if unknown:
            raise SystemExit(f"claims: no scenario {', '.join(sorted(unknown))}; they are {', '.join(sorted(names))}")
        return [s for s in SCENARIOS if s.name in wanted]
    if fault:  # the scenarios that hold a claim the fault must break
        must = set(FAULTS_BREAK[fault])
        return [s for s in SCENARIOS if must & {c.name for c in s.claims}]
    return list(SCENARIOS)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m claims", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", help="these scenarios (comma-separated) instead of all")
    p.add_argument("--fault", choices=sorted(FAULTS), help="plant this fault in every run (claims/faults.py)")
    p.add_argument("--every-fault", action="store_true", help="each fault in turn; exit 1 unless every one is caught")
    p.add_argument("--json", type=Path, help="write the verdicts here")
    p.add_argument("--keep", type=Path, help="keep the runs' directories here (default: removed at the end)")
    p.add_argument("--list", action="store_true", help="list the scenarios and their claims, and exit")
    a = p.parse_args(argv)
    if a.list:
        for sc in SCENARIOS:
            say(f"{sc.name}: {sc.says} ({sum(c.seconds for c in sc.commands):.0f} s)")
            for c in sc.claims:
                say(f"  {c.name}: {c.says}")
        return 0
    if os.geteuid() != 0:
        raise SystemExit("claims: needs root (its runs build namespaces and qdiscs)")
    if a.every_fault:
        passed_on = [x for x in (a.only and ["--only", a.only]) or []]
        missed = [f for f in FAULTS if main(["--fault", f, *passed_on]) != 0]
        say(
            f"planted faults: {len(FAULTS) - len(missed)} of {len(FAULTS)} caught"
            + (f"; NOT {missed}" if missed else "")
        )
        return 1 if missed else 0
    scenarios = chosen(a.only, a.fault)
    if a.fault:
        say(f"planted fault {a.fault}: {FAULTS[a.fault].__doc__}")
    work = a.keep or Path(tempfile.mkdtemp(prefix="bsz-claims."))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    verdicts: list[Verdict] = []
    try:
        for sc in scenarios:
            verdicts += run_scenario(sc, work, a.fault)
    finally:
        if a.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    say("")
    for v in verdicts:
        say(v.line())
    took = time.monotonic() - t0
    say(f"{summary(verdicts)} in {took:.0f} s")
    if a.json:
        record = {"fault": a.fault, "seconds": round(took), "verdicts": [v.to_dict() for v in verdicts]}
        a.json.write_text(json.dumps(record, indent=1) + "\n")
    if a.fault:
        missed = [v.claim for v in verdicts if v.claim in FAULTS_BREAK[a.fault] and v.verdict != BROKEN]
        say(
            f"fault {a.fault}: "
            + (f"NOT caught by {', '.join(missed)}" if missed else "caught by every claim it must break")
        )
        return 1 if missed else 0
    return 1 if any(v.verdict == BROKEN for v in verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())
