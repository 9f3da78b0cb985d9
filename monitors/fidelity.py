"""Link fidelity: departure times at the bottleneck from the net:net_dev_xmit tracepoint.

A private ftrace instance (instances/bsz-fidelity-PID) with only that event enabled, filtered to
the bottleneck device and full-size frames, so other runs and other tracing users are untouched.
Gaps between consecutive departures in busy periods are compared with the ideal frame time,
1514 B x 8 / C, as in the 2012 Mininet-HiFi fidelity figure. Besides the gaps, the lag of the
departures behind the ideal service curve of a busy link, in frames (`departure_lags`): at 1 Gb/s
10 % of a frame time is 1.2 us, no more than the trace's own timestamp noise, while a frame of lag
is 12 us there, and each lag is the difference of two timestamps, so their noise does not build up.
"""

from __future__ import annotations

import math
import os
import re
import statistics
import time
from pathlib import Path

from bufsize.monitors.base import Monitor
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.cleanup import remove_trace_instance
from bufsize.topologies.ledger import RunState
from bufsize.topologies.tracefs import (
    INSTANCE_PREFIX,
    TraceFormatError,
    check_all_parsed,
    instance_overruns,
    tracefs_root,
    tracepoints,
)

LINE = re.compile(r"\s(\d+\.\d+): net_dev_xmit: dev=(\S+) skbaddr=\S+ len=(\d+)")
THRESHOLDS = (10, 25, 50, 100)
# A gap longer than this many frame times means the queue ran dry: not a busy period.
IDLE_GAP_FRAMES = 10
MIN_BUSY_GAPS = 100
# Ring-buffer bytes per traced departure: the event is 28 bytes plus the device name, and the ring
# buffer adds a header and alignment; 64 leaves room. Twice the expected departures are provided for.
EVENT_BYTES = 64
MIN_BUFFER_KB = 1024


def trace_buffer_kb(rate_mbps: float, seconds: float) -> int:
    """Per-CPU ring buffer for `seconds` of full-size departures at `rate_mbps`, twice over.

    Sized to the trace, not fixed large: the kernel allocates it when the trace starts, in the
    middle of a run, and 64 MB per CPU (the old fixed size) stalled the line at 6 of 30 trace starts
    (25-161 ms), this size at none of 30 (bench/results/trace-alloc-stalls/).
    All departures can land on one CPU, so each CPU's buffer holds them all.
    """
    frames = rate_mbps * 1e6 / (FRAME_BYTES * 8) * max(seconds, 0.0)
    return max(MIN_BUFFER_KB, math.ceil(2 * frames * EVENT_BYTES / 1024))


class FidelityUnavailable(RuntimeError):
    pass


class FidelityMonitor(Monitor[tuple[dict, list[float]]]):
    """Departures of full-size frames from the bottleneck device between start() and stop().

    stop() returns the summary (or why there is none: `available` false and a `reason`) and the
    departure times. The ftrace instance is in the run's ledger before it is made.
    """

    def __init__(self, dev: str, rate_mbps: float, state: RunState | None = None, seconds: float = 2.0,
                 buffer_kb: int | None = None) -> None:  # fmt: skip
        self.dev, self.rate_mbps, self.state = dev, rate_mbps, state
        self.buffer_kb = buffer_kb if buffer_kb is not None else trace_buffer_kb(rate_mbps, seconds)
        self.error: str | None = None
        self.dir: Path | None = None

    def _begin(self) -> None:
        try:
            self._enable()
        except (FidelityUnavailable, TraceFormatError, OSError) as e:
            self.error = str(e)
            self._remove()

    def _enable(self) -> None:
        if not tracepoints().get("net/net_dev_xmit"):
            raise FidelityUnavailable("the net:net_dev_xmit tracepoint is not available (tracefs not mounted?)")
        root = tracefs_root()
        assert root is not None
        self.dir = Path(root) / "instances" / f"{INSTANCE_PREFIX}fidelity-{os.getpid()}"
        if self.state is not None:
            self.state.add_trace_instance(self.dir)
        self.dir.mkdir()
        self.ev = self.dir / "events" / "net" / "net_dev_xmit"
        (self.ev / "filter").write_text(f'name == "{self.dev}" && len >= {FRAME_BYTES}')
        (self.dir / "buffer_size_kb").write_text(str(self.buffer_kb))
        (self.dir / "trace").write_text("")
        self.t0 = time.monotonic()
        (self.ev / "enable").write_text("1")

    def _end(self) -> tuple[dict, list[float]]:
        times: list[float] = []
        try:
            if self.error is None:
                assert self.dir is not None
                (self.ev / "enable").write_text("0")
                seconds = round(time.monotonic() - self.t0, 2)
                text = (self.dir / "trace").read_text()
                times = [float(m.group(1)) for m in LINE.finditer(text)]
                check_all_parsed(text, "net_dev_xmit", len(times), LINE)
                # Departures the full ring buffer dropped: a hole reads as one idle gap, left out of
                # the busy gaps, but the count says the trace ran longer than its buffer.
                head = {"available": True, "seconds": seconds, "overruns": instance_overruns(self.dir)}
                return head | summarize(times, self.rate_mbps), times
        except (FidelityUnavailable, TraceFormatError, OSError) as e:
            self.error = str(e)
        finally:
            self._remove()
        return {"available": False, "reason": self.error}, times

    def _remove(self) -> None:
        if self.dir is not None and remove_trace_instance(self.dir) and self.state is not None:
            self.state.forget_trace_instance(self.dir)


def measure(dev: str, rate_mbps: float, seconds: float, state: RunState | None = None) -> tuple[dict, list[float]]:
    """Trace `seconds` of departures; the summary (or why there is none) and the departure times."""
    with FidelityMonitor(dev, rate_mbps, state, seconds) as mon:
        time.sleep(seconds)
        return mon.stop()


def busy_gaps_us(times: list[float], rate_mbps: float) -> list[float]:
    ideal_us = FRAME_BYTES * 8 / rate_mbps
    gaps = [(b - a) * 1e6 for a, b in zip(times, times[1:], strict=False)]
    return [g for g in gaps if g < IDLE_GAP_FRAMES * ideal_us]


def departure_lags(times: list[float], rate_mbps: float) -> tuple[list[float], int]:
    """Each busy-period departure's lag behind the ideal service curve of a busy link, in frames,
    and the number of busy periods (runs of at least two departures with busy gaps between them).

    Within a busy period with departures t_0..t_k and frame time T, a link running at exactly C
    is never ahead of its service curve, so the curve is anchored at the most favourable point so
    far: lag_k = ((t_k - k*T) - min_{j<=k} (t_j - j*T)) / T. A perfect link reads 0 throughout;
    clumps (two frames back to back, then a wait) about one frame at the first of each clump and 0
    at the second; a link at 0.99 C a lag growing by 0.01 frame per departure; the lag restarts
    at 0 after every idle gap. An idle stretch shorter than the idle threshold (IDLE_GAP_FRAMES)
    inside a busy period counts as lag too, for the rest of that period: the figure is an upper
    bound, exact while the queue stays non-empty.

    O(n), one pass. Times are taken relative to the period's first departure and k*T is a product,
    not a running sum, so rounding does not build up over a long period (250,000 departures at
    1 Gb/s); the busy/idle split is the one busy_gaps_us makes.
    """
    ideal_s = FRAME_BYTES * 8 / (rate_mbps * 1e6)
    idle_us = IDLE_GAP_FRAMES * (FRAME_BYTES * 8 / rate_mbps)  # as busy_gaps_us computes it, to the last bit
    lags: list[float] = []
    periods = 0
    n = len(times)
    i = 0
    while i < n:
        # The busy period starting at departure i runs to the last departure before an idle gap.
        end = i + 1
        while end < n and (times[end] - times[end - 1]) * 1e6 < idle_us:
            end += 1
        if end - i >= 2:
            periods += 1
            t0 = times[i]
            best = 0.0  # min over j <= k of (t_j - t_0) - j*T; j = 0 gives 0
            for k in range(end - i):
                x = (times[i + k] - t0) - k * ideal_s
                if x < best:
                    best = x
                lags.append((x - best) / ideal_s)
        i = end
    return lags, periods


def lag_summary(times: list[float], rate_mbps: float) -> dict:
    """p50 / p99 / max of departure_lags (linear interpolation between order statistics, as
    numpy's default), the departures they were taken over and the busy periods those fell in."""
    lags, periods = departure_lags(times, rate_mbps)
    if len(lags) < 2:
        return {"lag_departures": len(lags), "busy_periods": periods}
    cuts = statistics.quantiles(lags, n=100, method="inclusive")
    return {
        "lag_p50_frames": round(cuts[49], 3),
        "lag_p99_frames": round(cuts[98], 3),
        "lag_max_frames": round(max(lags), 3),
        "lag_departures": len(lags),
        "busy_periods": periods,
    }


def summarize(times: list[float], rate_mbps: float) -> dict:
    """Median gap, the fraction of busy-period gaps more than 10/25/50/100 % off the ideal, and
    the departures' lag behind the ideal service curve in frames (p50, p99, max; departure_lags).

    Refuses (FidelityUnavailable) when there are too few busy-period gaps to say anything: an idle
    link has no departures to judge, and a made-up "perfect" summary would be worse than none.
    """
    ideal_us = FRAME_BYTES * 8 / rate_mbps
    busy = busy_gaps_us(times, rate_mbps)
    if len(busy) < MIN_BUSY_GAPS:
        raise FidelityUnavailable(
            f"only {len(busy)} gaps between full-size departures in busy periods (need {MIN_BUSY_GAPS}): "
            "the link was not busy while it was traced"
        )
    dev = [abs(g - ideal_us) / ideal_us for g in busy]
    return {
        "ideal_us": round(ideal_us, 1),
        "departures": len(times),
        "gaps_busy": len(busy),
        "gaps_idle_excluded": len(times) - 1 - len(busy),
        "median_gap_us": round(statistics.median(busy), 1),
        "rate_from_gaps_mbps": round(FRAME_BYTES * 8 / statistics.mean(busy), 2),
        **{f"frac_gt{p}": round(sum(d > p / 100 for d in dev) / len(dev), 4) for p in THRESHOLDS},
        **lag_summary(times, rate_mbps),
    }


def reference_2012(path: Path) -> list[dict[str, float]]:
    """Rows of mininet-hifi-2012-dequeue-fidelity.tsv (flows, frac_gt10, ...) as numbers."""
    lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    head = lines[0].split("\t")
    return [dict(zip(head, map(float, ln.split("\t")), strict=True)) for ln in lines[1:]]
