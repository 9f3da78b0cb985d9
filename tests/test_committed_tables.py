"""The committed sweeps re-read by the current code give their committed tables, byte for byte.

A sweep's table.md and table.csv are derived from its result files alone (longlived/report.py), so a
change to how results are read, summarized or laid out shows here as a changed committed table. A
table that sets other sweeps beside its own (`bufsize plot --beside`) is rebuilt with the overlays of
the command the docs quote for it, read from the docs, so the test and the record cannot disagree.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bufsize.longlived.report import add_beside_cells, beside_label, load_results, summary_rows, write_table

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"
DOCS = REPO / "docs"


def quoted_overlays() -> dict[str, list[str]]:
    """Each sweep the docs quote a `bufsize plot SWEEP --beside OTHER ...` command for, and its
    others in the order given (paths under results/)."""
    text = " ".join(" ".join(p.read_text().split()) for p in sorted(DOCS.rglob("*.md")))
    found = {}
    for sweep, rest in re.findall(r"bufsize plot results/([^\s`]+)((?: --beside results/[^\s`]+)+)", text):
        found[sweep] = re.findall(r"--beside results/([^\s`]+)", rest)
    return found


BESIDE = quoted_overlays()
SWEEPS = sorted(
    str(t.parent.relative_to(RESULTS)) for t in RESULTS.rglob("table.csv") if any(t.parent.glob("n*-run*/result.json"))
)


def test_every_family_of_committed_sweeps_is_among_them_and_every_quoted_overlay():
    families = {s.split("/")[0] for s in SWEEPS}
    assert {"full", "theory", "twin", "quick", "fig11", "bbr"} <= families and len(SWEEPS) >= 30
    assert BESIDE and all(s in SWEEPS and set(o) <= set(SWEEPS) for s, o in BESIDE.items()), BESIDE


@pytest.mark.parametrize("name", SWEEPS)
def test_a_committed_sweep_gives_its_committed_table(name, tmp_path):
    d = RESULTS / name
    results = load_results(d)
    rows = summary_rows(results)
    others = [load_results(RESULTS / b) for b in BESIDE.get(name, [])]
    for i, other in enumerate(others, 1):
        add_beside_cells(rows, other, i)
    write_table(rows, tmp_path, [beside_label(results[0], o[0]) for o in others])
    for table in ("table.md", "table.csv"):
        assert (tmp_path / table).read_bytes() == (d / table).read_bytes(), f"{name}/{table}"
