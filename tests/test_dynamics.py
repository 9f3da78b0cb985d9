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


def test_loss_episodes_are_rises_of_the_drop_count_after_a_quiet_bin():
    from bufsize.longlived.dynamics import loss_cycle

    # 100 Hz for 10 s; losses at 1.00-1.05 s (one episode), 4.0 s, and 4.15 s (the same 0.2 s bin run).
    times = [i / 100 for i in range(1001)]
    drops, n = [], 0
    for t in times:
        n += t in (1.0, 1.02, 1.05, 4.0, 4.15)
        drops.append(n)
    c = loss_cycle(times, drops, bin_s=0.2)
    assert (c.episodes, c.lossy_bins) == (2, 2)
    assert c.window_s == pytest.approx(10.0) and c.interval_s == pytest.approx(5.0)
    quiet = loss_cycle(times, [0] * len(times), bin_s=0.2)
    assert quiet.count == 0 and quiet.interval_s is None
    # Drops in every bin (51: the last tick opens one): one episode by gaps, but the count follows the bins.
    dense = loss_cycle(times, list(range(len(times))), bin_s=0.2)
    assert dense.episodes == 1 and dense.lossy_bins == 51 and dense.interval_s == pytest.approx(10 / 25.5)
    # Where each episode starts (the aligned-samples bench cuts there): the first drop of each.
    from bufsize.longlived.dynamics import episode_starts

    assert [times[i] for i in episode_starts(times, drops, bin_s=0.2)] == [1.0, 4.0]
    assert episode_starts(times, [0] * len(times), bin_s=0.2) == []


def test_episode_interval_scales_the_model_to_what_the_trace_saw():
    from bufsize.longlived.dynamics import LossCycle, episode_interval, measured_sample_s

    def model(b: float) -> float:
        return b / 10  # seconds: a cycle growing with the buffer

    # At 100 packets the model says 10 s; the trace saw an episode every 5 s there and at 200 packets
    # (model 20 s) one every 10 s: the trace's scale is half the model's, at every buffer.
    seen = [(100.0, LossCycle(20.0, 4, 5)), (200.0, LossCycle(30.0, 3, 3))]
    assert episode_interval(seen, model, 100) == pytest.approx(5.0)
    assert episode_interval(seen, model, 50) == pytest.approx(2.5)
    assert episode_interval(seen, model, 50, min_episodes=8) is None  # 7 seen
    # Two episodes a sample, within 20 RTTs and the cap.
    assert measured_sample_s(5.0, 0.087, 30.0) == pytest.approx(10.0)
    assert measured_sample_s(0.3, 0.087, 30.0) == pytest.approx(1.74)
    assert measured_sample_s(22.0, 0.087, 30.0) == 30.0


def test_bbr_samples_span_a_probe_rtt_interval_whatever_its_losses_say():
    """BBR's dip is ProbeRTT every 10 s, not a loss: its samples are at least that long, by the model
    and when the trace's loss episodes (dense at small buffers) would make them shorter; Reno's are not."""
    from types import SimpleNamespace

    from bufsize.longlived.dynamics import BBR_PROBE_RTT_INTERVAL_S
    from bufsize.longlived.search import SearchOptions, probe_timing

    assert BBR_PROBE_RTT_INTERVAL_S == 10.0
    opts = SearchOptions(flows=100)
    for cc, floor in (("bbr", 10.0), ("reno", 20 * 0.087)):
        link = SimpleNamespace(cc=cc, rate_mbps=62.5, rtt_ms=[87.0])
        by_model = probe_timing(link, opts, 5 * FRAME_BYTES, None)
        by_trace = probe_timing(link, opts, 5 * FRAME_BYTES, 0.2)  # an episode every 0.2 s
        assert by_trace.sample_s == pytest.approx(floor), cc
        assert by_model.sample_s >= floor
    assert cycle_seconds("bbr", 2, 449, 10, 0.087) == BBR_PROBE_RTT_INTERVAL_S
