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
# Sender hosts: each point uses min(N, PRESET_MAX_HOSTS). The host count did not move the answer
# (cubic, full preset, on the line: N=200 answered 7-8 packets over 1, 2, 100 and 200 hosts, N=800 7
# over 1, 2 and 100; results/hosts/2026-11-25/), but it decides the shaper: on this 2-core machine `auto`
# gives the line at most 100 hosts, and HTB, beyond that, answered 2 packets at both N (its burst
# sends the time the link sat idle: 6 packets with a one-frame burst). Seed 004 says both that the
# hardware's flows came from one end host and that they were spread over 400 hosts; the 2012 code
# used 2. So the presets take the most hosts the line paces here, and N <= 100 keep one flow a host.
PRESET_MAX_HOSTS = 100


def hardware_cc() -> str:
    return "bic" if "bic" in available_congestion_controls() or kernel_has_module("tcp_bic") else "cubic"


def preset(name: str) -> dict:
    """Sweep settings a preset fixes; anything given on the command line overrides them."""
    base = {"rate_mbps": PAPER_RATE_MBPS, "rtt_ms": PAPER_RTT_MS, "max_hosts": PRESET_MAX_HOSTS}
    if name == "quick":
        # About 20 minutes here: one run of five N, three samples per probe, 10 % resolution.
        return base | {"flows": [2, 10, 50, 200, 800], "runs": 1, "cc": hardware_cc(), "samples": 3, "resolution": 0.1}
    if name == "full":
        return base | {"flows": FULL_FLOWS, "runs": RUNS, "cc": hardware_cc(), **SEQUENTIAL}
    if name == "theory":
        return base | {"flows": THEORY_FLOWS, "runs": RUNS, "cc": "reno", **SEQUENTIAL}
    raise KeyError(name)


PRESETS = ("quick", "full", "theory")
