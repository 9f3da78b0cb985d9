"""The replication table and figure from a sweep directory (synthetic results, real reference data)."""

from __future__ import annotations

import csv
import json
import shutil
import statistics

import pytest

from bufsize.cli.plot import plot_dir
from bufsize.longlived.report import (
    HARDWARE_TSV,
    MININET_2012_TSV,
    beside_label,
    make_report,
    percent,
    reference_runs,
    rtt_words,
    runs_cell,
    summary_rows,
    sweep_figure,
)
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.errors import UsageError


def result(n: int, packets: int, valid: bool = True) -> dict:
    bdp = 449.2
    return {
        "flows": n,
        "buffer_packets": packets,
        "buffer_bytes": packets * FRAME_BYTES,
        "theory_sqrt_n_packets": round(bdp / n**0.5, 1),
        "bdp_packets": bdp,
        "rtt_ms_for_theory": 87.0,
        "nominal_rate_mbps": 62.5,
        "target": 0.99,
        "cc": "cubic",
        "valid": valid,
        "wall_seconds": 100.0,
        "delay_backend": "delayline",
        "config": {"shaper": "htb"},
    }


def test_reference_data_is_in_the_repository():
    hw, old = reference_runs(HARDWARE_TSV), reference_runs(MININET_2012_TSV)
    assert len(hw[100]) == 15 and len(old[100]) == 3
    assert old[800] == [3000.0, 3000.0, 3000.0]  # the 2012 search's false floor of 2 packets


def test_summary_rows_medians_spread_and_ratios():
    rs = [result(10, 20), result(10, 30), result(10, 40, valid=False), result(100, 50)]
    rows = {r["flows"]: r for r in summary_rows(rs)}
    r10 = rows[10]
    assert r10["runs"] == 3 and r10["valid_runs"] == 2
    assert r10["median_packets"] == 30 and (r10["min_packets"], r10["max_packets"]) == (20, 40)
    assert r10["cv"] == pytest.approx(statistics.stdev([20, 30, 40]) / 30, abs=1e-3)
    assert r10["ratio_to_theory"] == pytest.approx(30 / 142.0, abs=0.01)
    hw10 = statistics.median(reference_runs(HARDWARE_TSV)[10])
    assert r10["ratio_to_hardware"] == pytest.approx(30 * FRAME_BYTES / hw10, abs=0.01)
    assert rows[100]["cv"] is None  # one run: no spread to report
    assert rows[10]["mininet2012_median_bytes"] == 52500
    assert r10["loss_at_answer_median"] is None  # none recorded: not invented


def test_summary_rows_loss_and_pacing_at_the_answer():
    rs = [result(10, 20) | {"loss_rate_at_answer": x, "fidelity": {"available": True, "frac_gt10": g}}
          for x, g in ((0.01, 0.02), (0.03, 0.05), (0.02, 0.01))]  # fmt: skip
    rs.append(result(10, 25) | {"fidelity": {"available": False}})
    (row,) = summary_rows(rs)
    assert row["loss_at_answer_median"] == 0.02 and row["pacing_gt10_median"] == 0.02


def test_report_writes_figure_and_tables(tmp_path):
    for i, (n, p) in enumerate([(2, 200), (10, 30), (800, 1)]):
        d = tmp_path / f"n{n:04d}-run1"
        d.mkdir()
        (d / "result.json").write_text(json.dumps(result(n, p, valid=i != 1)))
    paths = make_report(tmp_path)
    names = sorted(p.name for p in paths)
    assert names == ["figure.pdf", "figure.png", "table.csv", "table.md"]
    assert all(p.stat().st_size > (5000 if p.name.startswith("figure") else 100) for p in paths)
    md = (tmp_path / "table.md").read_text().splitlines()
    assert len(md) == 2 + 3 and md[-1].startswith("| 800 |")


def test_cautioned_runs_are_counted_and_explained_under_the_table(tmp_path):
    steal = [{"check": "hypervisor_steal", "value": 0.06, "limit": 0.02, "why": "..."}]
    rs = [result(10, 30) | {"cautions": steal}, result(10, 32) | {"cautions": []}, result(10, 34, valid=False)]
    rs.append(result(100, 12))  # written before results carried cautions: none counted
    for i, r in enumerate(rs):
        d = tmp_path / f"n{r['flows']:04d}-run{i}"
        d.mkdir()
        (d / "result.json").write_text(json.dumps(r))
    rows = {r["flows"]: r for r in summary_rows(rs)}
    assert rows[10]["cautioned_runs"] == 1 and rows[100]["cautioned_runs"] == 0
    assert (runs_cell(rows[10]), runs_cell(rows[100])) == ("3 (2; 1 cautioned)", "1 (1)")
    make_report(tmp_path)
    md = (tmp_path / "table.md").read_text()
    assert "| 10 | 3 (2; 1 cautioned) |" in md and "| 100 | 1 (1) |" in md
    assert md.rstrip().splitlines()[-1].startswith("Cautioned runs are valid, but the hypervisor took over 1%")
    # Without a cautioned run the table ends with its last row, as before.
    shutil.rmtree(tmp_path / "n0010-run0")
    make_report(tmp_path)
    assert (tmp_path / "table.md").read_text().rstrip().splitlines()[-1].startswith("| 100 |")


def test_the_legend_hides_no_answer_and_stays_on_the_page():
    """Tiny answers at small N (BBR answers 4 packets at N = 2-10) lie at the lower left, where the
    legend used to be drawn over them: it now sits below the axes, whole, inside the figure."""
    import matplotlib.pyplot as plt

    rs = [result(n, p) for n, p in ((2, 4), (5, 4), (10, 4), (100, 6), (800, 6))]
    fig = sweep_figure(rs, "BBR-like")
    try:
        fig.canvas.draw()
        (ax,) = [a for a in fig.axes if a.get_legend() is not None]
        legend, axes, page = ax.get_legend().get_window_extent(), ax.get_window_extent(), fig.bbox
        assert legend.y1 <= axes.y0, (legend, axes)  # under the plotting area, overlapping none of it
        assert page.x0 <= legend.x0 and legend.x1 <= page.x1 and page.y0 <= legend.y0, (legend, page)
        assert len(ax.get_legend().get_texts()) >= 4  # the theory, the hardware and this testbed's entries
    finally:
        plt.close(fig)


def test_published_data_are_compared_only_at_their_own_setting(tmp_path):
    """The hardware and 2012 runs were at 62.5 Mb/s with every flow at 87 ms: a sweep at another rate,
    or with RTTs spread about the same mean, gets no ratio to them and the figure says why."""
    same = summary_rows([result(10, 30)])[0]
    assert same["hardware_median_bytes"] is not None and same["mininet2012_median_bytes"] == 52500
    faster = result(10, 30) | {"nominal_rate_mbps": 155.0}
    spread = result(10, 30) | {"rtt_ms_largest": 127.0, "config": {"shaper": "line", "rtt_ms": [47.0, 87.0, 127.0]}}
    for other in (faster, spread):
        (row,) = summary_rows([other])
        assert row["hardware_median_bytes"] is None and row["ratio_to_hardware"] is None
        assert row["mininet2012_median_bytes"] is None and row["ratio_to_mininet2012"] is None
    d = tmp_path / "n0010-run1"
    d.mkdir()
    (d / "result.json").write_text(json.dumps(spread))
    make_report(tmp_path)
    assert "| 10 |" in (tmp_path / "table.md").read_text() and (tmp_path / "figure.png").stat().st_size > 5000
    assert rtt_words(spread) == "RTT 47..127 ms (mean 87)" and rtt_words(result(10, 30)) == "RTT 87 ms"
    assert [percent(t) for t in (0.98, 0.99, 0.995, 0.999)] == ["98%", "99%", "99.5%", "99.9%"]


def test_report_of_an_empty_directory_is_refused(tmp_path):
    with pytest.raises(UsageError, match="no result.json"):
        make_report(tmp_path)


def _sweep(d, results: list[dict]) -> None:
    for i, r in enumerate(results):
        run = d / f"n{r['flows']:04d}-run{i + 1}"
        run.mkdir(parents=True)
        (run / "result.json").write_text(json.dumps(r))


def test_a_sweep_beside_another_gains_its_median_range_and_ratio(tmp_path):
    """`bufsize plot DIR --beside OTHER`: BBR beside cubic, say. Each N gains the other sweep's median,
    its min..max and ours / its median, labelled by what differs; an N it lacks reads '-'."""
    ours, other = tmp_path / "bbr", tmp_path / "cubic"
    _sweep(ours, [result(10, 30) | {"cc": "bbr"}, result(10, 40) | {"cc": "bbr"}, result(100, 6) | {"cc": "bbr"}])
    _sweep(other, [result(10, 50), result(10, 70), result(10, 60)])
    make_report(ours, beside_dirs=[other])
    with open(ours / "table.csv") as f:
        rows = {int(r["flows"]): r for r in csv.DictReader(f)}
    assert float(rows[10]["beside1_median_packets"]) == 60 and rows[10]["beside1_min_packets"] == "50"
    assert float(rows[10]["ratio_to_beside1"]) == round(35 / 60, 2)
    assert rows[100]["beside1_median_packets"] == "" and rows[100]["ratio_to_beside1"] == ""
    md = (ours / "table.md").read_text().splitlines()
    head = [c.strip() for c in md[0].strip("|").split("|")]
    assert "cubic: median pkts" in head and "ours/cubic" in head
    row10 = dict(zip(head, (c.strip() for c in md[2].strip("|").split("|")), strict=True))
    assert (row10["cubic: min..max"], row10["ours/cubic"]) == ("50..70", "0.58")
    assert dict(zip(head, (c.strip() for c in md[3].strip("|").split("|")), strict=True))["ours/cubic"] == "-"
    # The label names every setting that differs; none differing says so.
    spread = result(10, 30) | {"nominal_rate_mbps": 155.0, "config": {"shaper": "line", "rtt_ms": [40.0, 120.0]}}
    assert beside_label(result(10, 1), spread) == "RTT 40..120 ms (mean 87), 155 Mb/s, shaper line"
    assert beside_label(result(10, 1), result(10, 2)) == "other sweep"


def test_beside_refuses_what_is_not_an_emulated_sweep(tmp_path):
    ours = tmp_path / "ours"
    _sweep(ours, [result(10, 30)])
    with pytest.raises(UsageError, match="--beside .*not a directory"):
        plot_dir(ours, beside=[tmp_path / "none"])
    twin = tmp_path / "twin"
    _sweep(twin, [result(10, 30) | {"kind": "sim-search"}])
    with pytest.raises(UsageError, match="--with-sim"):
        plot_dir(ours, beside=[twin])
    with pytest.raises(UsageError, match="not one run's"):
        plot_dir(ours / "n0010-run1", beside=[twin])
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no result.json"):
        plot_dir(ours, beside=[tmp_path / "empty"])
    with pytest.raises(UsageError, match="at most 3"):
        plot_dir(ours, beside=[ours] * 4)


def test_several_sweeps_beside_ours_each_get_their_columns(tmp_path):
    """Appenzeller et al.'s Fig 11 has three targets: the 99.9 % sweep beside the 98 % and 99.5 % ones gives each
    its own columns and curve, labelled by target; two alike are told apart by directory."""
    ours, t98, t995 = tmp_path / "999", tmp_path / "98", tmp_path / "995"
    _sweep(ours, [result(100, 80) | {"target": 0.999}])
    _sweep(t98, [result(100, 40) | {"target": 0.98}])
    _sweep(t995, [result(100, 50) | {"target": 0.995}])
    make_report(ours, beside_dirs=[t98, t995])
    with open(ours / "table.csv") as f:
        (row,) = csv.DictReader(f)
    assert (float(row["ratio_to_beside1"]), float(row["ratio_to_beside2"])) == (2.0, 1.6)
    head = (ours / "table.md").read_text().splitlines()[0]
    assert "ours/98% target" in head and "ours/99.5% target" in head
    shutil.copytree(t98, tmp_path / "98-again")
    make_report(ours, beside_dirs=[t98, tmp_path / "98-again"])
    head = (ours / "table.md").read_text().splitlines()[0]
    assert "ours/98% target (98) |" in head and "ours/98% target (98-again) |" in head


def test_each_run_has_its_interval_bar_and_flagged_runs_stay_out_of_the_median():
    """Every run is drawn with its search's interval as an error bar; a flagged run is drawn apart,
    named by the check it failed in the legend, and the median line is that of the valid runs only."""
    import matplotlib.pyplot as plt

    rs = []
    for n, packets, valid in ((10, 50, True), (10, 60, True), (10, 400, False), (100, 20, True), (100, 22, True)):
        r = result(n, packets, valid)
        r["uncertain_interval_packets"] = [packets - 5, packets + 10]
        r["flags"] = {"converged": True, "pacing_fidelity_ok": valid}
        rs.append(r)
    fig = sweep_figure(rs, "flagged apart")
    try:
        (ax,) = [a for a in fig.axes if a.get_legend() is not None]
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert "flagged (failed: pacing_fidelity_ok), not in the median" in labels, labels
        median = next(line for line in ax.get_lines() if "median of valid runs" in str(line.get_label()))
        assert list(median.get_xdata()) == [10, 100]
        # 55 packets at N = 10: the median of 50 and 60; with the flagged 400 it would be 60.
        assert list(median.get_ydata()) == [55 * FRAME_BYTES, 21 * FRAME_BYTES]
        # The bars span each run's interval: 45..60 packets around the run at 50.
        bars = [c for c in ax.containers if "valid runs" in str(c.get_label())][0]
        segments = bars.lines[2][0].get_segments()
        spans = sorted((round(s[0][1] / FRAME_BYTES), round(s[1][1] / FRAME_BYTES)) for s in segments)
        assert spans[0] == (15, 30) and (45, 60) in spans, spans
    finally:
        plt.close(fig)


def test_curves_pool_every_probe_and_draw_flagged_runs_apart(tmp_path):
    """curves.png: at each buffer the median and 10-90 % band of the samples pooled over the runs of
    one validity; a flagged run's probes are drawn (apart), never dropped."""
    from bufsize.longlived.curves import curve

    def probes(*rows: tuple[int, list[float]]) -> list[dict]:
        return [{"buffer_packets": b, "samples": s, "median": sorted(s)[len(s) // 2]} for b, s in rows]

    runs = [
        result(10, 30) | {"probes": probes((20, [0.97, 0.98, 0.96]), (40, [0.995, 0.99, 0.999]))},
        result(10, 32) | {"probes": probes((20, [0.975, 0.965, 0.97]), (30, [0.99, 0.991, 0.989]))},
        result(10, 60, valid=False) | {"probes": probes((60, [0.99, 0.992, 0.995]))},
    ]
    got = curve(runs, 10, valid=True)
    assert [b for b, *_ in got] == [20.0, 30.0, 40.0]
    b20 = got[0]
    assert b20[1] == pytest.approx(0.9700) and b20[2] < b20[1] < b20[3]  # six samples pooled over two runs
    assert b20[2] == pytest.approx(0.9625) and b20[3] == pytest.approx(0.9775)
    assert curve(runs, 10, valid=False) == [(60.0, 0.992, pytest.approx(0.9904), pytest.approx(0.9944))]
    assert curve(runs, 20, valid=True) == []
    for i, r in enumerate(runs):
        d = tmp_path / f"n0010-run{i + 1}"
        d.mkdir()
        (d / "result.json").write_text(json.dumps(r))
    names = sorted(p.name for p in make_report(tmp_path))
    assert names == ["curves.csv", "curves.png", "figure.pdf", "figure.png", "table.csv", "table.md"]
    assert (tmp_path / "curves.png").stat().st_size > 5000
    with open(tmp_path / "curves.csv") as f:
        drawn = list(csv.DictReader(f))
    # What the figure drew, as numbers: the valid runs' three buffers with their fit, the flagged run's
    # one without (its probes are drawn apart and not fitted).
    assert [(r["valid"], r["buffer_packets"], r["samples"]) for r in drawn] == [
        ("True", "20.0", "6"), ("True", "30.0", "3"), ("True", "40.0", "3"), ("False", "60.0", "3")]  # fmt: skip
    assert all(float(r["fit_low"]) <= float(r["fit"]) <= float(r["fit_high"]) for r in drawn[:3])
    assert drawn[3]["fit"] == ""


def test_the_fitted_curve_never_falls_holds_its_band_and_each_runs_range_is_read_or_recomputed():
    from bufsize.longlived.conditioning import conditioning
    from bufsize.longlived.curves import fit, isotonic, ranges
    from bufsize.longlived.median_search import Probe

    # Pool adjacent violators: a dip is pooled with its neighbour, weighted by samples.
    assert isotonic([0.9, 0.95, 0.93, 0.99], [1, 1, 1, 1]) == pytest.approx([0.9, 0.94, 0.94, 0.99])
    assert isotonic([0.95, 0.93], [3, 1]) == pytest.approx([0.945, 0.945])
    assert isotonic([0.9, 0.92], [1, 1]) == [0.9, 0.92]
    pooled = {10.0: [0.90, 0.92, 0.91], 20.0: [0.97, 0.95, 0.96], 30.0: [0.955, 0.96, 0.95], 40.0: [0.99, 0.995]}
    rows = fit(pooled)
    assert [b for b, *_ in rows] == [10.0, 20.0, 30.0, 40.0]
    fitted = [f for _, f, _, _ in rows]
    assert fitted == sorted(fitted) and fitted[1] == fitted[2] == pytest.approx(0.9575)  # 0.96 and 0.955 pooled
    assert all(lo <= f <= hi for _, f, lo, hi in rows) and rows[0][3] - rows[0][2] > 0.005  # a band, not a line
    assert fit(pooled) == rows  # seeded: the same sweep draws the same band
    # A result that records its range gives it; one written before the field gets it from its probes.
    probes = [Probe(30, [0.98, 0.985, 0.99], 0.985, False, False, False, 0.0),
              Probe(60, [0.988, 0.992, 0.991], 0.991, True, False, False, 0.0),
              Probe(90, [0.997, 0.998, 0.999], 0.998, True, False, False, 0.0)]  # fmt: skip
    old = result(10, 60) | {"probes": [p.__dict__ for p in probes], "options": {"precision": 0.1, "level": 0.9}}
    recorded = result(10, 40) | {"conditioning": {"range_packets": [35, 45]}}
    expected = conditioning(probes, 0.99, 60, 0.1, 0.9)["range_packets"]
    assert ranges([old, recorded, result(20, 9)], 10) == [tuple(float(x) for x in expected), (35.0, 45.0)]
