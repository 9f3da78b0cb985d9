"""Named sweeps: the main job's quick replication, the full one, and the Reno theory check.

The hardware comparison (quick, full) uses bic where the kernel has it and cubic otherwise: the
NetFPGA hosts and the 2012 emulation ran the Linux default of their day (BIC), so Reno there would
compare different congestion controls (design-notes section 5). The theory preset uses Reno, which
the sqrt(N) model assumes.
"""

from __future__ import annotations

from topologies.config import available_congestion_controls
from topologies.machine import kernel_has_module

PAPER_RATE_MBPS = 62.5
PAPER_RTT_MS = "87"
FULL_FLOWS = [2, 5, 10, 20, 50, 100, 200, 400, 600, 800]
# The Reno check needs fewer N (Reno's cycle at N=2 makes one search there take about half an hour).
THEORY_FLOWS = [2, 10, 50, 100, 200, 400, 800]
# Five runs per N: the spread of the answer (median, range, CV) needs more than three. A sweep runs
# every N of run 1 first, so a stopped sweep still covers every N; `--points` picks a subset.
RUNS = 5
# Full and theory sweeps decide each probe by a sequential sign test (5 to 20 samples): on a link
# simulated with the noise of real samples it cut the answer's spread from 28 % (3 fixed samples)
# to 6-7 % for about 3.5 times the samples (tests/test_search.py).
SEQUENTIAL = {"samples": 5, "max_samples": 20, "resolution": 0.05}


def hardware_cc() -> str:
    return "bic" if "bic" in available_congestion_controls() or kernel_has_module("tcp_bic") else "cubic"


def preset(name: str) -> dict:
    """Sweep settings a preset fixes; anything given on the command line overrides them."""
    base = {"rate_mbps": PAPER_RATE_MBPS, "rtt_ms": PAPER_RTT_MS, "max_hosts": 400}
    if name == "quick":
        # About 20 minutes here: one run of five N, three samples per probe, 10 % resolution.
        return base | {"flows": [2, 10, 50, 200, 800], "runs": 1, "cc": hardware_cc(), "samples": 3, "resolution": 0.1}
    if name == "full":
        return base | {"flows": FULL_FLOWS, "runs": RUNS, "cc": hardware_cc(), **SEQUENTIAL}
    if name == "theory":
        return base | {"flows": THEORY_FLOWS, "runs": RUNS, "cc": "reno", **SEQUENTIAL}
    raise KeyError(name)


PRESETS = ("quick", "full", "theory")
