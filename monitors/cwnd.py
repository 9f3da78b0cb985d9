"""Congestion windows of every flow from the tcp:tcp_probe tracepoint (the tcp_probe module left Linux in 4.16).

The tracepoint fires for every segment an established socket receives, in any namespace. A
private ftrace instance (instances/bsz-cwnd-PID) keeps other tracing users untouched; its filter
keeps only segments arriving at senders, i.e. whose remote port is one of the flows' server ports,
so receivers' data segments are not traced. The instance uses the monotonic clock so windows line
up with the queue samples. Events are drained from trace_pipe without blocking.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from bufsize.monitors.base import Monitor
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.cleanup import remove_trace_instance
from bufsize.topologies.ledger import RunState
from bufsize.topologies.tracefs import (
    INSTANCE_PREFIX,
    check_all_parsed,
    instance_overruns,
    tracefs_root,
    tracepoints,
)

# Every field spelled out (the tracepoint's print format since 4.16): no backtracking, about 1 us a
# line, which matters at thousands of ACKs a second. A line that does not match stops the trace
# with the line shown (check_all_parsed), never a run read as one without events.
EVENT = re.compile(
    rb" (\d+\.\d+): tcp_probe: family=\S+ src=(\S+) dest=\S+ mark=\S+ data_len=\d+ snd_nxt=\S+ "
    rb"snd_una=\S+ snd_cwnd=(\d+) ssthresh=(\d+) snd_wnd=\d+ srtt=(\d+)"
)


# Events per second the trace is left to carry whole. The kernel formats every event as text, and at
# 1 Gb/s (about 40,000 acks/s to the senders) reading them took about 15 % of the one CPU the
# traffic has on a 2-core machine, which then saturated: the queue monitor fell behind and the
# line's departures lagged 4.4 frames at p99 against 1.1 without the trace (20 flows,
# docs/scaling.md). Up to this many frames per second (about 240 Mb/s) every event is traced, as in
# every committed result; above it the trace is on for only a share of each 100 ms (trace_duty).
FULL_TRACE_FRAMES_PER_S = 20_000


def trace_duty(rate_mbps: float) -> float:
    """The share of each 100 ms the cwnd trace is on at this bottleneck rate: 1 up to
    FULL_TRACE_FRAMES_PER_S full-size frames per second, less in proportion beyond. Even at 0.1 a
    flow with one ack per two frames of a 10 Gb/s link's 1/2000 share is seen every period."""
    frames_per_s = rate_mbps * 1e6 / (FRAME_BYTES * 8)
    return 1.0 if frames_per_s <= FULL_TRACE_FRAMES_PER_S else max(0.1, FULL_TRACE_FRAMES_PER_S / frames_per_s)


class CwndUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class CwndEvent:
    t: float  # CLOCK_MONOTONIC seconds
    flow: str  # the sender's address:port
    cwnd: int  # packets
    ssthresh: int
    srtt_us: int


def parse_raw(chunk: bytes) -> list[tuple[bytes, bytes, bytes, bytes, bytes]]:
    """(time, flow, cwnd, ssthresh, srtt_us) of each event, undecoded: the recorder converts only what it keeps."""
    events = EVENT.findall(chunk)
    check_all_parsed(chunk, "tcp_probe", len(events), EVENT)
    return events


def parse(chunk: bytes) -> list[CwndEvent]:
    return [CwndEvent(float(t), f.decode(), int(c), int(ss), int(r)) for t, f, c, ss, r in parse_raw(chunk)]


class CwndTrace(Monitor[int]):
    """start() enables the trace, drain() as often as convenient (every 100 ms is plenty); stop()
    returns the events the kernel dropped. The instance is in the run's ledger before it exists."""

    def __init__(self, server_ports: range, state: RunState | None = None, buffer_kb: int = 8192) -> None:
        self.ports, self.state, self.buffer_kb = server_ports, state, buffer_kb
        self.fd = -1
        self.tail = b""

    def _begin(self) -> None:
        if not tracepoints().get("tcp/tcp_probe"):
            raise CwndUnavailable("the tcp:tcp_probe tracepoint is not available (tracefs not mounted?)")
        root = tracefs_root()
        assert root is not None
        self.dir = Path(root) / "instances" / f"{INSTANCE_PREFIX}cwnd-{os.getpid()}"
        if self.state is not None:
            self.state.add_trace_instance(self.dir)
        self.dir.mkdir()
        try:
            self.ev = self.dir / "events" / "tcp" / "tcp_probe"
            (self.ev / "filter").write_text(f"dport >= {self.ports.start} && dport < {self.ports.stop}")
            (self.dir / "buffer_size_kb").write_text(str(self.buffer_kb))
            (self.dir / "trace_clock").write_text("mono")
            self.fd = os.open(self.dir / "trace_pipe", os.O_RDONLY | os.O_NONBLOCK)
            (self.ev / "enable").write_text("1")
        except BaseException:
            self._close()
            raise

    def pause(self, paused: bool) -> None:
        """Stop or restart recording events (trace_duty); the instance and its buffer stay."""
        (self.ev / "enable").write_text("0" if paused else "1")

    def drain(self) -> list[tuple[bytes, bytes, bytes, bytes, bytes]]:
        parts = [self.tail]
        while True:
            try:
                chunk = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                break
            parts.append(chunk)
        data = b"".join(parts)
        cut = data.rfind(b"\n") + 1  # keep a partial last line for the next drain
        self.tail = data[cut:]
        return parse_raw(data[:cut])

    def _end(self) -> int:
        lost = instance_overruns(self.dir)
        self._close()
        return lost

    def _close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if remove_trace_instance(self.dir) and self.state is not None:
            self.state.forget_trace_instance(self.dir)
