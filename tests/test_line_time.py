"""The line shaper's lost time in a search: the share per measurement, the summary and the flag."""

from __future__ import annotations

import pytest

from bufsize.longlived.search import LINE_LOST_SHARE_OF_SLACK, Measurement, line_time, lost_note
from bufsize.topologies.delay import line_lost_share


def measurement(lost_ms: float | None, seconds: float = 2.0) -> Measurement:
    kept: dict = {"seconds": seconds, "forward_late_mean_us": 3.0}
    if lost_ms is not None:
        kept["line_lost_ms"] = lost_ms
    return Measurement(8, 0.0, 0.0, 1.0, [62.0, 62.0], [0.99, 0.99], 3, 1000, delay_line=kept)


def test_share_lost_is_the_lost_time_over_the_window_and_none_without_a_line() -> None:
    assert line_lost_share({"seconds": 2.0, "line_lost_ms": 3.0}) == pytest.approx(0.0015)
    assert line_lost_share({"seconds": 2.0}) is None  # the delay line without the line shaper
    assert line_lost_share({}) is None and line_lost_share(None) is None  # netem
    assert line_lost_share({"seconds": 0, "line_lost_ms": 1.0}) is None


def test_summary_and_limit_by_hand() -> None:
    # 1, 3 and 10 ms lost of 2 s each: 0.05, 0.15 and 0.5 % of the line's time.
    ms = [measurement(1.0), measurement(10.0), measurement(3.0)]
    at_999 = line_time(ms, 0.999)
    assert at_999 == {"median_share_lost": 0.0015, "max_share_lost": 0.005, "limit": 0.0005}
    assert at_999["median_share_lost"] > at_999["limit"]  # 99.9 % leaves 0.1 %: this search measured the machine
    at_99 = line_time(ms, 0.99)
    assert at_99 is not None and at_99["limit"] == 0.005 and at_99["median_share_lost"] <= at_99["limit"]
    assert LINE_LOST_SHARE_OF_SLACK == 0.5


def test_measurements_without_a_record_are_left_out_and_none_have_no_verdict() -> None:
    assert line_time([measurement(None), measurement(None)], 0.99) is None
    one = line_time([measurement(None), measurement(4.0)], 0.99)
    assert one == {"median_share_lost": 0.002, "max_share_lost": 0.002, "limit": 0.005}


def test_progress_line_names_a_probe_past_the_limit_only() -> None:
    assert lost_note(measurement(10.0), 0.999) == ", line lost 0.50% of its time"
    assert lost_note(measurement(10.0), 0.99) == ""  # exactly the limit: not past it
    assert lost_note(measurement(None), 0.999) == ""
