"""The report table carries the pacing lag, and reads results written before there was one."""

from __future__ import annotations

from bufsize.longlived.report import summary_rows, write_table
from bufsize.topologies import FRAME_BYTES


def result(packets: int, fidelity: dict) -> dict:
    return {
        "flows": 100,
        "buffer_packets": packets,
        "buffer_bytes": packets * FRAME_BYTES,
        "theory_sqrt_n_packets": 44.9,
        "bdp_packets": 449.2,
        "cc": "cubic",
        "valid": True,
        "wall_seconds": 100.0,
        "fidelity": fidelity,
    }


def test_lag_p99_median_over_runs_and_old_results_without_it_are_left_out(tmp_path):
    new = [{"available": True, "frac_gt10": g, "lag_p99_frames": x} for g, x in ((0.01, 0.4), (0.02, 1.5), (0.03, 0.9))]
    old = {"available": True, "frac_gt10": 0.05}  # a result.json from before the lag
    rs = [result(40 + i, f) for i, f in enumerate([*new, old, {"available": False, "reason": "not busy"}])]
    (row,) = summary_rows(rs)
    assert row["pacing_lag_p99_median"] == 0.9 and row["pacing_gt10_median"] == 0.025  # the old run's gaps still count
    _, md = write_table([row], tmp_path)
    head, _, line = md.read_text().splitlines()
    assert head.split(" | ")[-1] == "lag p99, frames (median) |" and line.split(" | ")[-1] == "0.9 |"


def test_results_without_any_lag_read_as_no_figure_not_zero():
    (row,) = summary_rows([result(40, {"available": True, "frac_gt10": 0.05}), result(41, {"available": False})])
    assert row["pacing_lag_p99_median"] is None and row["pacing_gt10_median"] == 0.05
