"""The recorder's per-second flow snapshots with flows that come and go (short flows): ended flows
leave the snapshots, and the count in congestion avoidance covers only flows active that second."""

from __future__ import annotations

import time

import bufsize.monitors.recorder as recorder
from bufsize.topologies.qdisc_stats import QdiscSample

HUGE = b"2147483647"


class FakeReader:
    def read(self) -> QdiscSample:
        return QdiscSample(time.monotonic(), 0, 0, 0, 0, 0, 1514)

    def close(self) -> None:
        pass


class FakeBottleneck:
    rate_mbps = 62.5

    def leaf_reader(self) -> FakeReader:
        return FakeReader()


class FakeTrace:
    """Flow a: always active, in congestion avoidance. Flow b: slow start for the first 0.5 s, then gone."""

    def __init__(self, ports, state) -> None:
        self.t0 = time.monotonic()

    def start(self) -> FakeTrace:
        return self

    def drain(self) -> list:
        events = [(b"0.0", b"10.0.0.1:1", b"20", b"10", b"87000")]
        if time.monotonic() - self.t0 < 0.5:
            events.append((b"0.0", b"10.0.0.2:2", b"4", HUGE, b"87000"))
        return events

    def pause(self, paused: bool) -> None:
        raise AssertionError("at 62.5 Mb/s the trace is never paused")

    def stop(self) -> int:
        return 0


def test_ended_flows_leave_the_snapshots(monkeypatch) -> None:
    monkeypatch.setattr(recorder, "CwndTrace", FakeTrace)
    monkeypatch.setattr(recorder, "STALE_S", 1.2)
    rec = recorder.Recorder(FakeBottleneck(), range(1, 2), None).start()  # type: ignore[arg-type]
    time.sleep(2.6)
    r = rec.stop()
    assert not r.error, r.error
    assert len(r.ca_counts) >= 2
    first, second = r.ca_counts[0], r.ca_counts[1]
    assert first[1:] == (2, 1)  # both active, only a in congestion avoidance (b has the initial ssthresh)
    assert second[1:] == (1, 1)  # b silent for over a second: not active
    t2 = second[0]
    assert {f for t, f, *_ in r.cwnd_flows if t == t2} == {"10.0.0.1:1"}  # b pruned after STALE_S
    assert max(n for _, n, _, _ in r.cwnd_sum) == 2


class CountingTrace(FakeTrace):
    """Counts the queue ticks the trace was on for: pause() switches, drain() returns nothing."""

    instances: list[CountingTrace] = []

    def __init__(self, ports, state) -> None:
        super().__init__(ports, state)
        self.paused, self.switches = False, []
        CountingTrace.instances.append(self)

    def pause(self, paused: bool) -> None:
        assert paused != self.paused, "a switch to the state it is already in"
        self.paused = paused
        self.switches.append((time.monotonic(), paused))

    def drain(self) -> list:
        assert not self.paused, "drained while off: the events of the on-window are read when it ends"
        return []


def test_at_1_gbps_the_trace_is_on_for_its_duty_share_of_each_period(monkeypatch) -> None:
    monkeypatch.setattr(recorder, "CwndTrace", CountingTrace)
    bottleneck = FakeBottleneck()
    bottleneck.rate_mbps = 1000.0
    rec = recorder.Recorder(bottleneck, range(1, 2), None).start()  # type: ignore[arg-type]
    time.sleep(1.55)
    r = rec.stop()
    assert not r.error, r.error
    assert 0.2 < recorder.trace_duty(1000.0) < 0.3  # 20,000 of 82,600 frames/s
    assert r.cwnd_duty == 0.3  # rounded up to 3 of the 10 queue ticks of each period: what ran
    assert recorder.summary(r)["cwnd"]["trace_duty"] == round(r.cwnd_duty, 3)
    switches = CountingTrace.instances[-1].switches
    offs = [t for t, p in switches if p]
    ons = [t for t, p in switches if not p]
    # The trace starts on: it goes off after the first window, then on and off again every 100 ms.
    assert switches[0][1] is True and 14 <= len(offs) <= 17 and len(offs) - 1 <= len(ons) <= len(offs), switches
    # Each on-window lasts ceil(duty x 10) = 3 ticks of 10 ms, the off-window the other 7.
    on_spans = [off - on for on, off in zip(ons, offs[1:], strict=False)]
    assert len(on_spans) >= 13 and all(0.015 < d < 0.06 for d in on_spans), on_spans
