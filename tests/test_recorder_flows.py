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
