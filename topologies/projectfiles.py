"""Where the project's own data files are, in a checkout and in an installed package.

A checkout keeps the published reference data in results/reference/ and the course kit's committed
runs in results/course/; `pip install .` copies them into the package as bufsize/reference/ and
bufsize/course/runs/ (pyproject.toml). Both are found from this file's place, so nothing depends on
the working directory.
"""

from __future__ import annotations

from pathlib import Path

# Checkout: the repository. Installed: site-packages/bufsize.
_ROOT = Path(__file__).resolve().parents[1]
REFERENCE_DIR = next(
    (d for d in (_ROOT / "results" / "reference", _ROOT / "reference") if d.is_dir()), _ROOT / "results" / "reference"
)
COURSE_RUNS_DIR = next(
    (d for d in (_ROOT / "results" / "course", _ROOT / "course" / "runs") if d.is_dir()), _ROOT / "results" / "course"
)
