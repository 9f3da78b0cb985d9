"""The committed sweeps and short-flow series re-read by the current code give their committed
tables, byte for byte.

A sweep's table.md and table.csv are derived from its result files alone (longlived/report.py), so a
change to how results are read, summarized or laid out shows here as a changed committed table. A
table that sets other sweeps beside its own (`bufsize plot --beside`) is rebuilt with the overlays of
the command the docs quote for it, read from the docs, so the test and the record cannot disagree.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from bufsize.longlived.report import add_beside_cells, beside_label, load_results, summary_rows, write_table
from bufsize.shortflows.fig10 import Fig10Spec
from bufsize.shortflows.fig12 import Fig12Spec
from bufsize.shortflows.loss import LossSpec
from bufsize.shortflows.mix import MixSpec
from bufsize.shortflows.transfer import TransferSpec

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


SPECS = {"fig10": Fig10Spec, "fig12": Fig12Spec, "loss": LossSpec, "mix": MixSpec, "transfer": TransferSpec}
SERIES = sorted(str(s.parent.relative_to(RESULTS)) for s in RESULTS.rglob("series.json"))


def quoted_besides() -> dict[str, str]:
    """Each twin series the docs quote a `bufsize sim shortexp ... --out DIR --beside EMULATED` command
    for, and its emulated series (paths under results/)."""
    text = " ".join(" ".join(p.read_text().split()) for p in sorted(DOCS.rglob("*.md")))
    pairs = re.findall(r"bufsize sim shortexp \w+ --out results/([^\s`]+) --beside results/([^\s`]+?)`", text)
    return {out: beside for out, beside in pairs if (RESULTS / out / "beside.md").exists()}


def test_every_kind_of_committed_series_is_among_them():
    kinds = {json.loads((RESULTS / s / "series.json").read_text())["experiment"] for s in SERIES}
    assert kinds == {"fig10", "fig12", "loss", "mix", "transfer"}
    # Both links' series are re-derived, and at least one twin series' beside.md is checked against the docs.
    assert any(s.startswith("twin/") for s in SERIES) and any(s.startswith("shortflows/") for s in SERIES)
    assert quoted_besides() and set(quoted_besides()) <= set(SERIES)


@pytest.mark.parametrize("name", SERIES)
def test_a_committed_series_gives_its_committed_tables(name, tmp_path):
    """A short-flow series' table.md and table.csv from its points' results alone, and a twin series'
    beside.md from its own and the emulated series the docs name, quoted there as it is; the figure
    is not compared."""
    from bufsize.sim.shortexp import write_beside

    d = RESULTS / name
    meta = json.loads((d / "series.json").read_text())
    spec = SPECS[meta["experiment"]](**meta["spec"])
    for r in d.glob("*/result.json"):
        (tmp_path / r.parent.name).mkdir()
        shutil.copy(r, tmp_path / r.parent.name / "result.json")
    spec.report(tmp_path)
    for table in ("table.md", "table.csv"):
        assert (tmp_path / table).read_bytes() == (d / table).read_bytes(), f"{name}/{table}"
    if name in quoted_besides():
        write_beside(tmp_path, spec, RESULTS / quoted_besides()[name])
        assert (tmp_path / "beside.md").read_bytes() == (d / "beside.md").read_bytes(), f"{name}/beside.md"
        quoted = "\n".join(p.read_text() for p in sorted(DOCS.rglob("*.md")))
        assert (d / "beside.md").read_text() in quoted, f"the docs quote {name}/beside.md otherwise"
