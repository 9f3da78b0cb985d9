"""The findings tables of docs/findings.md say what the committed sweeps hold.

The findings are rewritten by hand as sweeps grow; this checks every sweep table in
docs/findings.md (a bold header naming `results/<dir>/`, then a table whose columns start with N,
runs (valid), answers, median) and the five-search table against the result.json files under
that directory, so a findings page left behind by a new run fails here. (The tables lived in
README.md until the README was cut down; the test keeps its name.)
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from bufsize.longlived.report import load_results, runs_cell, summary_rows

REPO = Path(__file__).resolve().parents[1]
FINDINGS = REPO / "docs" / "findings.md"
SWEEP_HEADER = "| N | runs (valid) | answers (packets) | median | CV | x RTT*C/sqrt(N) | x hardware median |"
FIVE_HEADER = "| cc | N | answers (packets) | median | range | CV |"


def _tables(text: str, header: str) -> list[tuple[str, list[list[str]]]]:
    """(the text before the table since the previous table, its rows split into cells) per table."""
    lines = text.splitlines()
    out, since = [], 0
    for i, line in enumerate(lines):
        if line.strip().startswith(header):
            rows, j = [], i + 2  # skip the |---| line
            while j < len(lines) and lines[j].strip().startswith("|"):
                rows.append([c.strip() for c in lines[j].strip().strip("|").split("|")])
                j += 1
            out.append(("\n".join(lines[since:i]), rows))
            since = j
    return out


def _answers(cell: str) -> list[int]:
    return [int(x) for x in cell.split(",")]


def _sweep_tables(text: str | None = None) -> list[tuple[Path, list[list[str]]]]:
    found = []
    for before, rows in _tables(FINDINGS.read_text() if text is None else text, SWEEP_HEADER):
        dirs = re.findall(r"\(`(results/[^`]+?)/?`", before)
        assert dirs, f"a findings table with no `results/...` directory named above it: {before[-200:]!r}"
        found.append((REPO / dirs[-1], rows))
    return found


def test_readme_sweep_tables_match_committed_results() -> None:
    tables = _sweep_tables()
    assert len(tables) >= 2, "docs/findings.md should carry the full and the theory sweep's findings tables"
    for d, rows in tables:
        results = load_results(d)
        summary = {r["flows"]: r for r in summary_rows(results)}
        in_readme = {int(r[0]): r for r in rows}
        assert sorted(in_readme) == sorted(summary), (d, sorted(in_readme), sorted(summary))
        for n, cells in in_readme.items():
            s = summary[n]
            ordered = [r["buffer_packets"] for r in results if r["flows"] == n]
            assert cells[1] == runs_cell(s), (d, n, cells[1])
            assert sorted(_answers(cells[2])) == sorted(ordered), (d, n, cells[2], ordered)
            assert float(cells[3]) == s["median_packets"], (d, n, cells[3])
            assert float(cells[5]) == s["ratio_to_theory"], (d, n, cells[5])
            hw = s["ratio_to_hardware"]
            assert cells[6] == ("-" if hw is None else str(hw)), (d, n, cells[6], hw)


def test_readme_five_search_table_matches_committed_results() -> None:
    # The sweeps it draws on are those whose tables come before it (a later sweep has its own section).
    text = FINDINGS.read_text()
    by_cc: dict[str, list[dict]] = {}
    for d, _ in _sweep_tables(text[: text.index(FIVE_HEADER)]):
        for r in load_results(d):
            by_cc.setdefault(r["cc"], []).append(r)
    (_, rows), *_ = _tables(FINDINGS.read_text(), FIVE_HEADER)
    assert rows
    for cc, n, answers, median, span, *_ in rows:
        ours = [r["buffer_packets"] for r in by_cc[cc.lower()] if r["flows"] == int(n)]
        assert len(ours) >= 5, (cc, n, ours)
        assert sorted(_answers(answers)) == sorted(ours), (cc, n, answers, ours)
        assert float(median) == statistics.median(ours), (cc, n, median)
        assert span == f"{min(ours)}..{max(ours)}", (cc, n, span)


def test_readme_ratios_to_the_rules_match_the_full_sweep() -> None:
    """The findings' summary "0.24 to 0.44 x RTT*C/sqrt(N), and 0.51 to 0.92 x the same rule redone for cubic's"
    are the committed full sweep's smallest and largest ratios of its medians to each rule."""
    text = " ".join(FINDINGS.read_text().split())  # its summary, moved there from README.md
    m = re.search(r"that is ([\d.]+) to ([\d.]+) x RTT\*C/sqrt\(N\), and ([\d.]+) to ([\d.]+) x the same rule", text)
    assert m, "the findings' summary no longer states the full sweep's ratios to the rules"
    rows = summary_rows(load_results(REPO / "results" / "full" / "2026-11-25"))
    theory = [r["ratio_to_theory"] for r in rows]
    cubic = [r["ratio_to_cc_rule"] for r in rows]
    assert [float(x) for x in m.groups()] == [min(theory), max(theory), min(cubic), max(cubic)]


def test_the_hardware_points_called_censored_are_its_search_floor() -> None:
    """docs/findings.md calls the hardware's N >= 400 points a floor: every sweep recorded the same
    bytes there, RTT*C/(8 sqrt(N)) at 62.5 Mb/s and 87 ms."""
    from bufsize.longlived.report import HARDWARE_TSV, reference_runs

    hw = reference_runs(HARDWARE_TSV)
    floor = 62.5e6 / 8 * 0.087 / 8
    for n in (400, 500, 600, 800):
        # sweep 21 recorded 15018 bytes at N = 800, the only value there that is not the floor
        values = [b for b in hw[n] if b < 10_000]
        assert len(values) >= 5 and len(set(values)) == 1, (n, hw[n])
        assert values[0] * n**0.5 == pytest.approx(floor, rel=1e-3), n
    assert "censored" in FINDINGS.read_text()


PLATEAU = REPO / "bench" / "results" / "plateau"
FACTOR_HEADER = "| N, RTTs | senders | answers | crossing |"
FACTOR_SETS = {("200", "87 ms"): "factor-searches-n200", ("800", "87 ms"): "factor-searches-n800",
               ("200", "47..127 ms"): "factor-searches-n200-spread"}  # fmt: skip
SENDERS = {"the kernel's": "kernel", "paced": "paced", "every segment ACKed": "ackall"}


def _factor_runs(set_dir: str, condition: str) -> list[dict]:
    """A condition's searches in round order (`NAME-ROUND/result.json`, bench/factor_ab.py)."""
    runs = sorted((PLATEAU / set_dir).glob(f"{condition}-[0-9]*/result.json"), key=lambda p: int(p.parent.name[-1]))
    return [json.loads(p.read_text()) for p in runs]


def test_plateau_factor_searches_in_the_docs_are_the_committed_searches() -> None:
    """The quiet night's factor table (bench/results/plateau/README.md, section 5), in round order
    with the unconverged ones marked, and the findings' summary sentence on it, say what the committed searches
    answered."""
    (_, rows), *_ = _tables((PLATEAU / "README.md").read_text(), FACTOR_HEADER)
    assert len(rows) == 8
    for where, senders, answers, *_ in rows:
        n, rtts = (x.strip() for x in where.split(",", 1))
        runs = _factor_runs(FACTOR_SETS[(n, rtts)], SENDERS[senders.split(" (")[0]])
        assert runs and all(r["flows"] == int(n) for r in runs), (where, senders)
        said = [(int(m.group(1)), bool(m.group(2))) for m in re.finditer(r"(\d+)( \(unconverged\))?", answers)]
        assert said == [(r["buffer_packets"], not r["flags"]["converged"]) for r in runs], (where, senders, answers)
    kernel = {n: ", ".join(str(r["buffer_packets"]) for r in _factor_runs(f"factor-searches-n{n}", "kernel"))
              for n in (200, 800)}  # fmt: skip
    readme = " ".join(FINDINGS.read_text().split())  # the summary, moved there from README.md
    assert f"({kernel[200]} at N = 200; {kernel[800]} at N = 800)" in readme, kernel
