"""`pip install .` is a real package: installed into a fresh virtualenv and run from outside the
checkout, it answers --version, finds its reference data and course runs, builds the delay line on
first use, and `bufsize doctor` reports a machine it can run on."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import isolated

from bufsize import __version__

REPO = Path(__file__).resolve().parents[1]


# `parallel`: the one command that builds (doctor's qdisc probe) runs in a private mount namespace with a
# run ledger of its own (conftest.isolated), so the tests that build beside this one never see it.
@pytest.mark.parallel
@pytest.mark.integration
def test_pip_install_outside_the_checkout(tmp_path, root):
    # What an sdist holds, copied: a build in the checkout itself would leave build/ and egg-info there.
    src = tmp_path / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "bsz-*", "fuzz-corpus")
    for part in ("buffersizing", "topologies", "monitors", "results/reference", "results/course"):
        shutil.copytree(REPO / part, src / part, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    venv = tmp_path / "venv"
    # The project's interpreter, not the venv's: a venv made from a venv would see its packages.
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    subprocess.run([str(base), "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(src)],
                         capture_output=True, text=True, timeout=900, cwd=tmp_path)  # fmt: skip
    assert pip.returncode == 0, pip.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(venv / "bin" / "bufsize"), *argv], capture_output=True, text=True,
                              cwd=elsewhere, timeout=300)  # fmt: skip

    assert run("--version").stdout.strip() == f"bufsize {__version__}"
    show = "import bufsize.scaffold.projectfiles as p, bufsize.topologies.delay as d; print(p.REFERENCE_DIR);"
    show += "print(p.COURSE_RUNS_DIR); print(d.HELPER)"
    where = subprocess.run([str(venv / "bin" / "python"), "-c", show], capture_output=True, text=True, cwd=elsewhere,
                           check=True).stdout.split()  # fmt: skip
    site = venv / "lib"
    for path in where:
        assert Path(path).is_relative_to(site), f"{path} is not in the installed package"
    assert sorted(p.name for p in Path(where[0]).glob("*.tsv")) == sorted(
        p.name for p in (REPO / "results" / "reference").glob("*.tsv")
    )
    assert not Path(where[2]).exists()  # the source ships; the binary is built on first use
    doctor = isolated([str(venv / "bin" / "bufsize"), "doctor", "--json"], tmp_path, 120, cwd=elsewhere)
    assert doctor.left == {"netns": [], "ledger": []}, doctor.left  # the probe tore itself down
    caps = json.loads(doctor.stdout)
    assert caps["delayline_built"] and Path(where[2]).exists(), doctor.stderr
    assert doctor.returncode == 0, caps["problems"]
    assert "built the delay line" in doctor.stderr
    model = run("model", "--flows", "100", "--json")
    assert model.returncode == 0 and json.loads(model.stdout)
    runs = sorted(Path(where[1]).glob("run-*/answers.json"))
    assert runs, f"no course runs shipped in {where[1]}"
    shutil.copy(runs[0], elsewhere / "answers.json")
    graded = run("course", "check", str(elsewhere))
    assert graded.returncode == 0, graded.stdout + graded.stderr
    # The student's package has the starter and the checker, not the instructor's solution.
    starter = subprocess.run([str(venv / "bin" / "python"), "-c", "import bufsize.course.starter"], cwd=elsewhere)
    assert starter.returncode == 0
    sol = subprocess.run([str(venv / "bin" / "python"), "-c", "import bufsize.course.solution"], cwd=elsewhere,
                         capture_output=True, text=True)  # fmt: skip
    assert sol.returncode == 1 and "No module named 'bufsize.course.solution'" in sol.stderr, sol.stderr
