"""The precision rule on noiseless links: how far the curve's bend moves its answer (no traffic).

The precision rule fits a straight line to utilization against ln(buffer) near the crossing, and its
interval is of the samples' noise. On a link without noise that interval shrinks to nothing, while a
curve that bends inside the fit's window still tilts the line: the answer then lies outside the
interval it reports. This prints, for curves of the simulated link (longlived/simlink.py: deficit a
power of the buffer) from flat to steep and for several targets, the fixed-count search's answer
(exact without noise), the precision rule's, and how far apart they are.

    .venv/bin/python bench/precision_bias.py > bench/results/precision-bias.md
"""

from __future__ import annotations

import time

from bufsize.longlived.median_search import MedianSearch
from bufsize.longlived.simlink import LinkModel, SimLink

CROSSING, TOP = 42.0, 898
EXPONENTS = (0.5, 1.0, 2.5, 4.0, 5.0)
TARGETS = (0.95, 0.97, 0.99)


def main() -> None:
    t0 = time.monotonic()
    print("| deficit exponent | target | exact answer (pkts) | precision rule (pkts) | its interval | off by |")
    print("|---|---|---|---|---|---|")
    for exponent in EXPONENTS:
        model = LinkModel("noiseless", CROSSING, exponent, 0.0)
        for target in TARGETS:
            exact = MedianSearch(SimLink(model), target=target, hi_packets=TOP, samples=3).run()
            precise = MedianSearch(SimLink(model), target=target, hi_packets=TOP, samples=3, precision=0.1).run()
            lo, hi = precise.uncertain_interval_packets
            off = precise.buffer_packets / exact.buffer_packets - 1
            print(f"| {exponent:g} | {target:g} | {exact.buffer_packets} | {precise.buffer_packets} | {lo}..{hi} "
                  f"| {off:+.0%} |")  # fmt: skip
    print(f"\n{len(EXPONENTS) * len(TARGETS) * 2} searches in {time.monotonic() - t0:.1f} s of wall time.")


if __name__ == "__main__":
    main()
