"""Link fidelity: departure times at the bottleneck from the net:net_dev_xmit tracepoint.

A private ftrace instance (instances/bsz-fidelity-PID) with only that event enabled, filtered to
the bottleneck device and full-size frames, so other runs and other tracing users are untouched.
Gaps between consecutive departures in busy periods are compared with the ideal frame time,
1514 B x 8 / C, as in the 2012 Mininet-HiFi fidelity figure.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from pathlib import Path

from buffersizing import FRAME_BYTES
from buffersizing.capabilities import tracefs_root, tracepoints

LINE = re.compile(r"\s(\d+\.\d+): net_dev_xmit: dev=(\S+) skbaddr=\S+ len=(\d+)")
THRESHOLDS = (10, 25, 50, 100)
# A gap longer than this many frame times means the queue ran dry: not a busy period.
IDLE_GAP_FRAMES = 10
MIN_BUSY_GAPS = 100


class FidelityUnavailable(RuntimeError):
    pass


class Trace:
    """Records departures of full-size frames from one device (any namespace: names are filtered)."""

    def __init__(self, dev: str, buffer_kb: int = 65536) -> None:
        if not tracepoints().get("net/net_dev_xmit"):
            raise FidelityUnavailable("the net:net_dev_xmit tracepoint is not available (tracefs not mounted?)")
        root = tracefs_root()
        assert root is not None
        self.dir = Path(root) / "instances" / f"bsz-fidelity-{os.getpid()}"
        self.dir.mkdir()
        try:
            self.ev = self.dir / "events" / "net" / "net_dev_xmit"
            (self.ev / "filter").write_text(f'name == "{dev}" && len >= {FRAME_BYTES}')
            (self.dir / "buffer_size_kb").write_text(str(buffer_kb))
        except BaseException:
            self.dir.rmdir()
            raise

    def record(self, seconds: float) -> list[float]:
        (self.dir / "trace").write_text("")
        (self.ev / "enable").write_text("1")
        try:
            time.sleep(seconds)
        finally:
            (self.ev / "enable").write_text("0")
        text = (self.dir / "trace").read_text()
        return [float(m.group(1)) for m in LINE.finditer(text)]

    def close(self) -> None:
        (self.ev / "enable").write_text("0")
        self.dir.rmdir()

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def busy_gaps_us(times: list[float], rate_mbps: float) -> list[float]:
    ideal_us = FRAME_BYTES * 8 / rate_mbps
    gaps = [(b - a) * 1e6 for a, b in zip(times, times[1:], strict=False)]
    return [g for g in gaps if g < IDLE_GAP_FRAMES * ideal_us]


def summarize(times: list[float], rate_mbps: float) -> dict:
    """Median gap and the fraction of busy-period gaps more than 10/25/50/100 % off the ideal.

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
    }


def deviations(times: list[float], rate_mbps: float) -> list[float]:
    """|gap - ideal| / ideal of every busy-period gap, for the CCDF."""
    ideal_us = FRAME_BYTES * 8 / rate_mbps
    return [abs(g - ideal_us) / ideal_us for g in busy_gaps_us(times, rate_mbps)]


def reference_2012(path: Path) -> list[dict[str, float]]:
    """Rows of mininet-hifi-2012-dequeue-fidelity.tsv (flows, frac_gt10, ...) as numbers."""
    lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    head = lines[0].split("\t")
    return [dict(zip(head, map(float, ln.split("\t")), strict=True)) for ln in lines[1:]]


def measure(dev: str, rate_mbps: float, seconds: float) -> tuple[dict, list[float]]:
    """Trace `seconds` of departures; the summary (or why there is none) and the departure times."""
    times: list[float] = []
    try:
        with Trace(dev) as trace:
            times = trace.record(seconds)
        return {"available": True, "seconds": seconds} | summarize(times, rate_mbps), times
    except (FidelityUnavailable, OSError) as e:
        return {"available": False, "reason": str(e)}, times
