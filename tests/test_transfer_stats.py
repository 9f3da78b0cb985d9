"""Short-flow statistics on made-up records: completion by size, queue tail, flows in CA, ss parsing."""

from __future__ import annotations

import math
import random

import pytest

from bufsize.shortflows.run import ca_summary, lateness, model_beside
from bufsize.shortflows.stats import (
    fct_by_size,
    initial_windows,
    offered_load,
    percentile,
    queue_ccdf,
    size_bins,
    started_between,
    tail_slope,
    throughput_distribution,
    transfer_counts,
)
from bufsize.traffic.workload import MSS_BYTES, wire_bytes


def row(i: int, packets: float, fct: float, status: str = "done", t: float = 0.0, **kw) -> dict:
    r = {"id": i, "kind": "open", "size_bytes": int(packets * MSS_BYTES), "t_start": t, "t_planned": t,
         "t_end": t + fct, "fct_s": fct, "status": status, "retrans": 0, "init_cwnd": 10}  # fmt: skip
    return r | kw


def test_percentile_interpolates_like_numpy() -> None:
    xs = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert percentile(xs, 0.5) == 5.5
    assert percentile(xs, 0.95) == pytest.approx(9.55)
    assert percentile([4.0], 0.99) == 4.0
    assert math.isnan(percentile([], 0.5))


def test_fct_by_size_groups_by_length_and_ignores_unfinished() -> None:
    rows = [row(1, 2, 0.1), row(2, 2, 0.3), row(3, 14, 1.0, retrans=2), row(4, 14, 3.0), row(5, 14, 9.0, "failed")]
    bins = fct_by_size(rows)
    assert [b["packets"] for b in bins] == ["2", "14"]
    two, fourteen = bins
    assert two["transfers"] == 2 and two["mean_s"] == pytest.approx(0.2) and two["median_s"] == pytest.approx(0.2)
    assert fourteen["transfers"] == 2 and fourteen["mean_s"] == pytest.approx(2.0)
    assert fourteen["retrans_mean"] == 1.0 and fourteen["with_retrans"] == 0.5


def test_rows_that_do_not_count_retransmissions_have_none_not_zero() -> None:
    """The twin's transfers carry no retransmission count: its bins say None, not that none were sent."""
    rows = [{k: v for k, v in row(i, 14, 0.1 * i).items() if k != "retrans"} for i in (1, 2, 3)]
    (b,) = fct_by_size(rows)
    assert b["transfers"] == 3 and b["median_s"] == pytest.approx(0.2)
    assert b["retrans_mean"] is None and b["with_retrans"] is None


def test_many_lengths_fall_into_power_of_two_bins() -> None:
    rows = [row(i, n, 0.1) for i, n in enumerate(range(1, 40), 1)]
    assert size_bins(rows) == [(1, 1), (2, 3), (4, 7), (8, 15), (16, 31), (32, 63)]
    bins = fct_by_size(rows)
    assert sum(b["transfers"] for b in bins) == 39
    assert bins[2]["transfers"] == 4  # 4..7 packets


def test_counts_windows_load_and_initial_windows() -> None:
    rows = [row(1, 10, 0.1, t=0.5), row(2, 10, 0.1, t=1.5, init_cwnd=4), row(3, 10, 0.1, "unfinished", t=2.5)]
    assert transfer_counts(rows) == {"started": 3, "done": 2, "failed": 0, "unfinished": 1}
    assert [r["id"] for r in started_between(rows, 1.0, 3.0)] == [2, 3]
    assert initial_windows(rows) == {4: 1, 10: 2}
    load = offered_load(rows, 2.0, 10.0)
    assert load == pytest.approx(3 * wire_bytes(10 * MSS_BYTES) * 8 / 2 / 10e6)


def test_queue_ccdf_of_a_geometric_queue_has_its_slope() -> None:
    # P(Q >= b) = r^b: the tail's kappa is -ln r.
    r = 0.8
    rng = random.Random(5)
    samples = [int(math.log(1 - rng.random()) / math.log(r)) for _ in range(200_000)]
    ccdf = queue_ccdf(samples)
    assert ccdf[0] == (0, 1.0)
    assert all(p1 >= p2 for (_, p1), (_, p2) in zip(ccdf, ccdf[1:], strict=False))
    assert ccdf[-1][0] == max(samples)
    kappa = tail_slope(ccdf)
    assert kappa == pytest.approx(-math.log(r), rel=0.05)


def test_tail_slope_needs_a_tail() -> None:
    assert tail_slope(queue_ccdf([0] * 100 + [1])) is None
    assert queue_ccdf([]) == []


def test_ca_summary_reads_the_window_only() -> None:
    counts = [(0.5, 9, 9), (1.0, 4, 2), (2.0, 6, 3), (3.0, 5, 5), (9.0, 1, 1)]
    assert ca_summary(counts, (1.0, 3.0)) == {"snapshots": 3, "active_mean": 5.0, "mean": 3.33, "min": 2, "max": 5}
    assert ca_summary(counts, (4.0, 5.0)) == {"snapshots": 0}


def test_throughput_distribution_and_fairness() -> None:
    even = throughput_distribution([1.0] * 10, 1.0)
    assert even["jain_index"] == 1.0 and even["min_mbps"] == even["max_mbps"] == 1.0
    one_hog = throughput_distribution([10.0] + [0.0] * 9, 1.0)
    assert one_hog["jain_index"] == pytest.approx(0.1)
    assert throughput_distribution([], 1.0) == {"flows": 0}


def test_lateness_reads_open_loop_transfers_only() -> None:
    rows = [row(1, 1, 0.1, t=1.0, t_planned=0.99), row(2, 1, 0.1, t=2.0, t_planned=1.5, kind="closed")]
    late = lateness(rows)
    assert late["transfers"] == 1 and late["max_s"] == pytest.approx(0.01)
    assert lateness([]) == {"transfers": 0, "p99_s": 0.0}


def test_model_beside_uses_the_lengths_sent_and_the_initial_window() -> None:
    rows = [row(i, 14, 0.1) for i in range(1, 11)]
    m2, m10 = model_beside(rows, 0.8, 2), model_beside(rows, 0.8, 10)
    # 14 packets from IW 2: bursts 2, 4, 8: E[X] = 14/3; from IW 10: bursts 10, 4: E[X] = 7.
    assert m2["burst_moments"]["e1"] == pytest.approx(14 / 3, abs=1e-3)
    assert m10["burst_moments"]["e1"] == pytest.approx(7.0)
    assert m10["mean_queue_packets_f10"] > m2["mean_queue_packets_f10"]
    assert model_beside(rows, 1.2, 2)["available"] is False
    # Capped at 4 packets in flight, IW 2: bursts 2, 4, 4, 4: E[X] = 14/4.
    m_cap = model_beside(rows, 0.8, 2, max_window=4)
    assert m_cap["burst_moments"]["e1"] == pytest.approx(3.5) and m_cap["max_window"] == 4


def test_line_time_lost_over_the_window_flags_a_stall() -> None:
    from bufsize.scaffold.experiment import line_lost
    from bufsize.shortflows.run import line_kept_time

    s0 = {"line": {"clock_resets": 3, "lost_ns": 1_000_000}}
    s1 = {"line": {"clock_resets": 4, "lost_ns": 251_000_000}}
    lost = line_lost(s0, s1)
    assert lost == {"clock_resets": 1, "lost_ms": 250.0}
    assert line_kept_time(lost, 40.0) is False  # a quarter-second stall in 40 s
    assert line_kept_time({"clock_resets": 0, "lost_ms": 0.0}, 40.0) is True
    assert line_lost({}, {}) is None and line_kept_time(None, 40.0) is None  # no line shaper: no verdict
