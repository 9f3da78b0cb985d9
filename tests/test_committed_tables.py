"""The committed sweeps re-read by the current code give their committed tables, byte for byte.

A sweep's table.md and table.csv are derived from its result files alone (longlived/report.py), so a
change to how results are read, summarized or laid out shows here as a changed committed table. Two
tables set other sweeps beside their own (`bufsize plot --beside`); they are rebuilt with the same
overlays, which the docs quote with the command.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bufsize.longlived.report import add_beside_cells, beside_label, load_results, summary_rows, write_table

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"
# Sweeps whose table was made with other sweeps beside it, and those sweeps in the order given.
BESIDE = {
    "bbr/2026-11-27": ["full/2026-11-27"],
    "fig11/2026-11-27-999": ["fig11/2026-11-27-98", "fig11/2026-11-27-995"],
}
SWEEPS = sorted(
    str(t.parent.relative_to(RESULTS)) for t in RESULTS.rglob("table.csv") if any(t.parent.glob("n*-run*/result.json"))
)


def test_the_sweeps_named_by_the_method_are_among_them():
    named = {"full/2026-11-25", "full/2026-11-27", "theory/2026-11-25", "twin/2026-11-27-reno", "twin/2026-11-27-cubic"}
    assert named <= set(SWEEPS) and len(SWEEPS) >= 30


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
