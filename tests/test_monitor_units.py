"""Monitor logic that needs no network: fidelity summaries and drop accounting."""

from __future__ import annotations

import pytest

from buffersizing import FRAME_BYTES
from monitors.fidelity import FidelityUnavailable, summarize

IDEAL_S = FRAME_BYTES * 8 / 62.5e6


def test_perfect_pacing_has_no_gaps_off():
    times = [i * IDEAL_S for i in range(1000)]
    s = summarize(times, 62.5)
    assert s["median_gap_us"] == pytest.approx(193.8, abs=0.1)
    assert s["frac_gt10"] == 0 and s["gaps_busy"] == 999


def test_clumps_are_counted_and_idle_gaps_excluded():
    # Pairs of back-to-back frames every two frame times: half the gaps ~0, half ~2x ideal.
    times = []
    t = 0.0
    for _ in range(500):
        times += [t, t + 1e-6]
        t += 2 * IDEAL_S
    times.append(t + 1.0)  # one long idle spell: not a busy-period gap
    s = summarize(times, 62.5)
    assert s["gaps_idle_excluded"] == 1
    assert s["frac_gt50"] == pytest.approx(1.0, abs=0.01)
    assert s["frac_gt100"] == pytest.approx(0.0, abs=0.01)


def test_idle_link_is_refused_not_invented():
    with pytest.raises(FidelityUnavailable, match="not busy"):
        summarize([0.0, 1.0, 2.0], 62.5)
    with pytest.raises(FidelityUnavailable):
        summarize([], 62.5)
