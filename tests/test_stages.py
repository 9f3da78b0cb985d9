"""The test command's stages (tests/stages.sh) and the VM stage's refusal to pass unseen.

The VM stage must fail where it cannot run, unless BSZ_VM_OPTIONAL=1 says on purpose to skip it; the
stages runner must run the claims after the structure stage failed and name each outcome in its
summary. Both are run here for real, with stand-ins for what they call (a PATH without apt-get, a
fake Python for pytest, the claims and the summary, a fake VM stage).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def bare_path(tmp_path: Path) -> str:
    """A PATH with the few tools stage.sh needs before its apt check, and no apt-get."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("bash", "dirname", "uname", "id", "awk", "date"):
        found = shutil.which(tool)
        assert found, tool
        (bindir / tool).symlink_to(found)
    return str(bindir)


def run_stage(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    e = {"PATH": bare_path(tmp_path), "HOME": str(tmp_path)} | env
    return subprocess.run(["bash", str(REPO / "tests/vm/stage.sh")], env=e, capture_output=True, text=True,
                          timeout=60)  # fmt: skip


def test_vm_stage_that_cannot_run_fails(tmp_path):
    r = run_stage(tmp_path)
    if os.uname().machine != "x86_64" or os.geteuid() != 0:
        reason = "x86_64" if os.uname().machine != "x86_64" else "needs root"
    else:
        reason = "no apt-get"
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.startswith("FAIL: VM stage could not run:"), r.stdout
    assert reason in r.stdout and "BSZ_VM_OPTIONAL=1" in r.stdout


def test_vm_stage_skips_only_when_asked(tmp_path):
    r = run_stage(tmp_path, BSZ_VM_OPTIONAL="1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("SKIP: VM stage:") and "BSZ_VM_OPTIONAL=1" in r.stdout


def fake(path: Path, text: str, rc: int) -> Path:
    path.write_text(f"#!/bin/bash\necho '{text}'\nexit {rc}\n")
    path.chmod(0o755)
    return path


def run_stages(tmp_path: Path, py_rc: int, vm_line: str, vm_rc: int, py_line: str = "3 passed, 1 skipped in 0.5s"
               ) -> subprocess.CompletedProcess:  # fmt: skip
    py = fake(tmp_path / "python", py_line, py_rc)
    vm = fake(tmp_path / "vm.sh", vm_line, vm_rc)
    env = {k: v for k, v in os.environ.items() if k != "BSZ_TEST_LOGS"} | {"PY": str(py), "VM_STAGE": str(vm)}
    return subprocess.run(["bash", str(REPO / "tests/stages.sh")], env=env, capture_output=True, text=True,
                          timeout=60)  # fmt: skip


def summary(out: str) -> list[str]:
    return out.split("test stages:\n", 1)[1].splitlines()


def test_stages_all_pass_and_say_so(tmp_path):
    r = run_stages(tmp_path, 0, "PASS: VM stage: 10 passed (wall time 300 s)", 0)
    assert r.returncode == 0, r.stdout
    rows = summary(r.stdout)
    assert [row.split()[0] for row in rows[:4]] == ["root,", "the", "VM,", "claims"]
    assert all(" passed " in row for row in rows[:4]), rows
    assert "3 passed, 1 skipped" in rows[0] and "PASS: VM stage: 10 passed" in rows[2]
    assert rows[-1] == "all stages passed"


def test_a_pass_with_inconclusive_claims_says_so_last(tmp_path):
    """The claims stage passes with inconclusive claims (none broken); the command's last line must not
    read as if they held."""
    r = run_stages(tmp_path, 0, "PASS: VM stage: 10 passed", 0, "claims: 2 held, 0 broken, 13 inconclusive in 700 s")
    assert r.returncode == 0, r.stdout
    assert summary(r.stdout)[-1].startswith("all stages passed, but 13 claim(s) inconclusive"), r.stdout


def test_a_failed_stage_fails_the_command_and_the_rest_still_run(tmp_path):
    r = run_stages(tmp_path, 1, "PASS: VM stage: 10 passed", 0)
    assert r.returncode == 1
    rows = summary(r.stdout)
    assert all("FAILED (exit 1)" in rows[i] for i in (0, 1, 3))  # the claims ran after the others failed
    assert "PASS: VM stage" in rows[2]
    assert rows[-1].startswith("a stage failed")


def test_a_skipped_vm_stage_is_named_in_the_summary(tmp_path):
    r = run_stages(tmp_path, 0, "SKIP: VM stage: no apt-get (BSZ_VM_OPTIONAL=1)", 0)
    assert r.returncode == 0
    assert "skipped on purpose" in summary(r.stdout)[2]


def test_the_summary_names_the_slowest_tests_of_both_lanes_and_counts_the_verdicts(tmp_path):
    """tests/stage_summary.py: the slowest tests across both JUnit reports, slowest first, and each claim
    that did not hold with its cause; a report the stage never wrote is said, not an error."""
    for name, times in (("a.xml", [3.0, 12.5]), ("b.xml", [7.25])):
        cases = "".join(f'<testcase classname="tests.test_x" name="t{t}" time="{t}"/>' for t in times)
        (tmp_path / name).write_text(f"<testsuites><testsuite>{cases}</testsuite></testsuites>")
    verdicts = [{"claim": "rate", "verdict": "held", "why": "", "figure": ""},
                {"claim": "pacing", "verdict": "inconclusive", "why": "disturbed from outside in 2 runs", "figure": ""},
                {"claim": "host-rtts", "verdict": "broken", "why": "missed", "figure": ""}]  # fmt: skip
    (tmp_path / "claims.json").write_text(json.dumps({"seconds": 300, "verdicts": verdicts}))
    argv = [
        sys.executable,
        str(REPO / "tests/stage_summary.py"),
        "--slowest",
        "2",
        "--claims",
        str(tmp_path / "claims.json"),
    ]
    reports = [str(tmp_path / n) for n in ("a.xml", "b.xml", "gone.xml")]
    out = subprocess.run([*argv, "--junit", *reports], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[1:3] == ["   12.5 s  tests/test_x.py::t12.5", "    7.2 s  tests/test_x.py::t7.25"], out
    assert out[3] == "claims: 1 held, 1 broken, 1 inconclusive in 300 s"
    assert out[4:] == ["  pacing: inconclusive (disturbed from outside in 2 runs)", "  host-rtts: broken (missed)"]
    none = subprocess.run([*argv[:-2], "--claims", str(tmp_path / "none.json"), "--junit", str(tmp_path / "x.xml")],
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "(no report:" in none and "claims: no verdicts" in none
