"""Settle and sample times follow the congestion-control dynamics."""

from __future__ import annotations

import pytest

from bufsize.longlived.dynamics import auto_timing, cycle_seconds
from bufsize.topologies import FRAME_BYTES


def test_reno_cycle_is_half_a_window_of_round_trips():
    # One flow, BDP 449 + buffer 449 packets: W = 898, cycle W/2 RTTs = 449 x 87 ms.
    assert cycle_seconds("reno", 1, 449, 449, 0.087) == pytest.approx(449 * 0.087)


def test_cubic_cycle_is_k_for_big_windows():
    w = 898.0
    assert cycle_seconds("cubic", 1, 449, 449, 0.087) == pytest.approx((w * 0.3 / 0.4) ** (1 / 3))


@pytest.mark.parametrize("cc", ["reno", "cubic", "bbr"])
def test_more_flows_never_need_longer_probes(cc):
    t = [auto_timing(cc, n, 62.5, 87, 100 * FRAME_BYTES) for n in (1, 2, 10, 100, 800)]
    for a, b in zip(t, t[1:], strict=False):
        assert b.sample_s <= a.sample_s and b.settle_s <= a.settle_s
    # Never shorter than 20 round trips or one second, never longer than the cap.
    assert all(1.0 <= x.sample_s <= 30.0 and x.sample_s >= 20 * 0.087 for x in t)


def test_few_reno_flows_sample_for_longer_than_the_2012_search():
    t = auto_timing("reno", 2, 62.5, 87, 300 * FRAME_BYTES)
    assert t.sample_s > 10 and t.settle_s > 10  # the 2012 probes: 3 s settle, 1 s samples
