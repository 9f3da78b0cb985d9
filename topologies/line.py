"""The line shaper: the bottleneck queue and rate inside the delay line process (`--shaper line`).

Why: HTB and TBF release each frame from a kernel timer whose interrupt, and the NET_TX softirq
behind it, come 10-50 us late on this VM with as much jitter (bench/results/pacing.md): more than
10 % of a frame time at 62.5 Mb/s. The delay line already busy-polls to about a microsecond, so it
can be the bottleneck itself: frames from the switch wait in its drop-tail FIFO (bfifo's rule, a
byte limit) and leave at the link rate, each when the one before it has been serialized.

The delay line publishes the FIFO's counters in a shared page (struct line_status in
delayline.c) under a sequence lock; this module reads it (as QdiscSample, like a qdisc's netlink
answer, so monitors do not care which shaper runs) and changes the limit in place through it.
All of the RTT goes on the ack path then, so the frames' departures from the FIFO are the frames
the delay line sends to the receiver, on the device the fidelity trace watches.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.bottleneck import Bottleneck
from bufsize.topologies.errors import RunError, UsageError
from bufsize.topologies.qdisc_stats import QdiscSample
from bufsize.topologies.units import check_buffer_bytes

MAGIC = 0x31454E494C5A5342  # "BSZLINE1"
FIELDS = (
    "magic seq limit_bytes backlog_bytes backlog_frames enq_frames enq_bytes sent_frames sent_bytes"
    " drops clock_resets want_gen want_limit applied_gen rate_bps burst_bytes lost_ns"
).split()
LAYOUT = struct.Struct(f"={len(FIELDS)}Q")
OFFSET = {name: 8 * i for i, name in enumerate(FIELDS)}
# The delay line holds 65536 frames per direction (its -n default); the FIFO takes them from the
# forward pool, so a larger buffer would drop for want of memory, not by its limit.
MAX_FRAMES = 60_000
MAX_BUFFER_BYTES = MAX_FRAMES * FRAME_BYTES
# How far the line may fall behind its schedule and then catch up back to back (delayline.c -B).
# Further behind, the time is lost for good, as HTB loses capacity past its burst (config.py): in
# the test suite, with other work on the machine, a 2-frame allowance let a 20 Mb/s link carry 68 %
# of C during the reference. So the same rule as HTB: 2 ms of the rate, 2 to 10 frames. With the
# line on a CPU of its own a wake-up is a few us late and the allowance is never used (lost_ns and
# clock_resets in the status page say when it was).
MIN_BURST_BYTES = 2 * FRAME_BYTES
MAX_BURST_BYTES = 10 * FRAME_BYTES
BURST_S = 0.002


def default_burst_bytes(rate_mbps: float) -> int:
    return min(max(round(rate_mbps * 1e6 / 8 * BURST_S), MIN_BURST_BYTES), MAX_BURST_BYTES)


# Where the time goes (200 cubic flows, 62.5 Mb/s, 50-packet buffer, 3 s traces): the delay line
# sleeping until 50 us before each departure (its default) put 20-26 % of gaps >10 % off; wake-ups
# on this VM come tens of us late. Spinning whenever a departure is due within 1 ms (always, while
# the queue holds frames at these rates; it sleeps when idle): still 7-12 %, because every frame it
# sends is processed inside its send(): the receiver's TCP for data, and for acks the switch, the
# sender's TCP and the new data it sends. Both together with that work moved off its CPU (RPS on the
# two ports it sends into, the delay line pinned to a CPU of its own): 2.1-2.6 %.
# It then runs its CPU all the time, and as a real-time task the kernel throttles it for 50 ms of
# every second (sched_rt_runtime_us 950000): the link carried 59.4 of 62.5 Mb/s with a full queue.
# So it runs under normal scheduling at nice -20 (62.5 Mb/s held, lateness unchanged).
# A reader waits at most this long for the counters to hold still (the delay line's stall check,
# delay.STALL_S, names a stopped delay line before this runs out).
READ_TIMEOUT_S = 5.0
SPIN_US = 1000
RTPRIO = 0
NICE = -20


def isolation(cpus: set[int]) -> tuple[int, int] | None:
    """(the delay line's CPU, RPS mask of the others) on a machine with 2 or more CPUs, else None."""
    if len(cpus) < 2:
        return None
    own = max(cpus)
    return own, sum(1 << c for c in cpus if c != own)


def check_line_buffer(buffer_bytes: int, name: str = "buffer") -> int:
    check_buffer_bytes(buffer_bytes, name)
    if buffer_bytes > MAX_BUFFER_BYTES:
        raise UsageError(f"{name} {buffer_bytes} bytes: the line shaper holds at most {MAX_BUFFER_BYTES} bytes")
    return buffer_bytes


class LineStatus:
    """The shared page of one running line shaper: consistent reads, and limit changes."""

    def __init__(self, path: Path, timeout: float = 2.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fd = os.open(path, os.O_RDWR)
                try:
                    if os.fstat(fd).st_size >= LAYOUT.size:
                        self.map = mmap.mmap(fd, 4096)
                        if self._field("magic") == MAGIC:
                            return
                        self.map.close()
                finally:
                    os.close(fd)
            except OSError as e:
                if time.monotonic() > deadline:
                    raise RunError(f"the line shaper's status {path} cannot be read: {e}") from e
            if time.monotonic() > deadline:
                raise RunError(f"the line shaper's status {path} was never filled in")
            time.sleep(0.01)

    def _field(self, name: str) -> int:
        return struct.unpack_from("=Q", self.map, OFFSET[name])[0]

    def read(self, timeout: float = READ_TIMEOUT_S) -> dict[str, int]:
        """Every counter, from one moment (retried while the delay line is writing). An update takes
        a few hundred ns, but the delay line can be preempted in the middle of one (at 800 flows
        over 400 hosts, for tens of ms). So retry by time, not by count."""
        deadline = time.monotonic() + timeout
        tries = 0
        while True:
            before = self._field("seq")
            values = LAYOUT.unpack_from(self.map, 0)
            if before % 2 == 0 and self._field("seq") == before:
                return dict(zip(FIELDS, values, strict=True))
            tries += 1
            if tries % 1000 == 0:
                if time.monotonic() > deadline:
                    raise RunError(
                        f"the line shaper's counters stayed mid-update for {timeout:.0f} s: the delay line is "
                        "stopped or starved"
                    )
                time.sleep(0.0002)  # the writer was preempted: let it run

    def set_limit(self, limit_bytes: int, timeout: float = 5.0) -> None:
        """Ask for a new limit and wait until the delay line has taken it (it looks on every loop,
        at least every 200 ms when idle). The timeout outlasts the delay line's stall check
        (delay.STALL_S), so a stopped delay line is reported as such by the caller's health check."""
        gen = self.read()["applied_gen"] + 1
        struct.pack_into("=Q", self.map, OFFSET["want_limit"], limit_bytes)
        struct.pack_into("=Q", self.map, OFFSET["want_gen"], gen)  # after the limit: it is the signal
        deadline = time.monotonic() + timeout
        while True:
            s = self.read()
            if s["applied_gen"] == gen and s["limit_bytes"] == limit_bytes:
                return
            if time.monotonic() > deadline:
                raise RunError(
                    f"the delay line (the line shaper) did not take the buffer {limit_bytes} B within {timeout:.0f} s"
                )
            time.sleep(0.002)

    def close(self) -> None:
        self.map.close()


class LineReader:
    """The line's FIFO as a QdiscSample per read(), like QdiscReader reads the bfifo."""

    def __init__(self, path: Path) -> None:
        self.status = LineStatus(path)

    def read(self) -> QdiscSample:
        s = self.status.read()
        t = time.monotonic()
        return QdiscSample(
            t, s["sent_bytes"], s["sent_frames"], s["backlog_frames"], s["backlog_bytes"], s["drops"], s["limit_bytes"]
        )

    def close(self) -> None:
        self.status.close()

    def __enter__(self) -> LineReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class LineBottleneck(Bottleneck):
    """The bottleneck as the delay line's FIFO: ns/dev are the delay line's port toward the receiver,
    whose transmissions are the departures. status_path is set before the delay line starts."""

    status_path: Path | None = None

    def commands(self) -> list[str]:
        return []  # no qdisc tree: the switch's port only forwards

    def kick_socket(self):  # type: ignore[override]
        raise ValueError("the line shaper needs no kicks: it is the pacer")

    def _status(self) -> LineStatus:
        if self.status_path is None:
            raise RunError("the line shaper has not been started")
        return LineStatus(self.status_path)

    def set_buffer(self, buffer_bytes: int) -> None:
        check_line_buffer(buffer_bytes)
        status = self._status()
        try:
            status.set_limit(buffer_bytes)
        finally:
            status.close()
        self.buffer_bytes = buffer_bytes

    def leaf_reader(self) -> LineReader:  # type: ignore[override]
        if self.status_path is None:
            raise RunError("the line shaper has not been started")
        return LineReader(self.status_path)

    def delayline_args(self) -> list[str]:
        """bsz-delayline options that make it this bottleneck."""
        assert self.status_path is not None
        rate = str(int(round(self.rate_mbps * 1e6)))
        return ["-L", str(self.buffer_bytes), "-R", rate, "-B", str(self.burst_bytes), "-q", str(self.status_path)]

    def own_drop_labels(self) -> set[str]:
        return set()  # its drops are in the shared page, in no interface or qdisc counter
