"""The instructor's answers to the starter's gaps (buffersizing/course/starter.py); the committed
course runs (results/course/) come from it. It lives in the repository, beside the instructor's
guide (docs/course.md), and not in the package a student installs: run it from the checkout.

    sudo .venv/bin/python docs/course/solution.py --out results/course/run-1
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Callable

from bufsize.course import starter
from bufsize.topologies import FRAME_BYTES


def theory_packets(rtt_ms: float, rate_mbps: float, flows: int) -> float:
    bdp_bytes = rtt_ms / 1e3 * rate_mbps * 1e6 / 8
    return bdp_bytes / FRAME_BYTES / math.sqrt(flows)


def utilization(rates_mbps: list[float], rate_mbps: float) -> float:
    return statistics.fmean(rates_mbps) / rate_mbps


def smallest_buffer(probe: Callable[[int], float], lo: int, hi: int, target: float) -> int:
    while lo < hi:
        mid = (lo + hi) // 2
        if probe(mid) >= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


def main(argv: list[str] | None = None) -> int:
    starter.theory_packets = theory_packets
    starter.utilization = utilization
    starter.smallest_buffer = smallest_buffer
    return starter.main(argv)


if __name__ == "__main__":
    sys.exit(main())
