"""delay.timing_between: a window's timekeeping from two of the delay line's cumulative snapshots."""

from __future__ import annotations

import pytest

from bufsize.topologies.delay import timing_between


def snap(pid: int, t_s: float, fwd: tuple[int, float], rev: tuple[int, float], line: tuple[int, int] | None) -> dict:
    s = {
        "pid": pid,
        "time_ns": int(t_s * 1e9),
        "forward": {"tx_frames": fwd[0], "late_mean_us": fwd[1]},
        "reverse": {"tx_frames": rev[0], "late_mean_us": rev[1]},
    }
    if line is not None:
        s["line"] = {"lost_ns": line[0], "clock_resets": line[1]}
    return s


def test_the_windows_mean_lateness_comes_from_the_sums_not_the_cumulative_means():
    # 1000 frames at a mean of 2 us, then 1000 more at 10 us: the window's mean is 10, where the
    # cumulative mean reads 6.
    a = snap(7, 10.0, (1000, 2.0), (500, 1.0), (5_000_000, 3))
    b = snap(7, 12.5, (2000, 6.0), (1500, 1.0), (7_500_000, 4))
    t = timing_between(a, b)
    assert t == {
        "seconds": 2.5,
        "forward_late_mean_us": 10.0,
        "reverse_late_mean_us": 1.0,
        "line_lost_ms": 2.5,
        "line_clock_resets": 1,
    }


def test_no_frames_no_line_or_another_process_say_so_instead_of_inventing_numbers():
    a = snap(7, 1.0, (100, 3.0), (100, 3.0), None)
    b = snap(7, 2.0, (100, 3.0), (140, 4.0), None)
    t = timing_between(a, b)
    assert t is not None
    assert t["forward_late_mean_us"] is None  # nothing released that way in the window
    assert t["reverse_late_mean_us"] == pytest.approx((560 - 300) / 40, abs=0.01)
    assert "line_lost_ms" not in t  # no line shaper: nothing it could have lost
    # A restarted delay line (another pid) starts its counters again: no difference to take.
    assert timing_between(a, snap(8, 2.0, (10, 1.0), (10, 1.0), None)) is None
    assert timing_between({}, b) is None and timing_between(a, {}) is None
