"""Where the project's own data files are, in a checkout and in an installed package.

A checkout keeps the published reference data in results/reference/ and the course kit's committed
runs in results/course/; `pip install .` copies them into the package as bufsize/reference/ and
bufsize/course/runs/ (pyproject.toml). Both are found from this file's place, so nothing depends on
the working directory.
"""

from __future__ import annotations

from pathlib import Path

# This file is buffersizing/scaffold/ in a checkout and bufsize/scaffold/ when installed.
_CHECKOUT = Path(__file__).resolve().parents[2]
_PACKAGE = Path(__file__).resolve().parents[1]
REFERENCE_DIR = next(
    (d for d in (_CHECKOUT / "results" / "reference", _PACKAGE / "reference") if d.is_dir()),
    _CHECKOUT / "results" / "reference",
)
COURSE_RUNS_DIR = next(
    (d for d in (_CHECKOUT / "results" / "course", _PACKAGE / "course" / "runs") if d.is_dir()),
    _CHECKOUT / "results" / "course",
)
# The committed runs of the main job, whose wall times its plan quotes (a checkout only).
QUICK_REFERENCE_DIR = _CHECKOUT / "results" / "quick"
# The committed results of a checkout (reference runs, lab records), which commands redraw or rewrite
# only when told to: a user's run must not change a tracked file. LOCAL_RUNS_DIR below is inside it
# but ignored by git.
COMMITTED_RESULTS_DIR = _CHECKOUT / "results"
# Where a user's own runs go by default: inside results/ but ignored by git (.gitignore), so that
# running the main job never changes a tracked file; relative, like every --out, to where it runs.
LOCAL_RUNS_DIR = Path("results") / "local"
# The 2012 emulator's inter-departure gaps, drawn beside each run's own.
FIDELITY_2012 = REFERENCE_DIR / "mininet-hifi-2012-dequeue-fidelity.tsv"
