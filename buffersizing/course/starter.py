"""Assignment starter: how small can a router's buffer be? (the handout: docs/course-handout.md)

Get your own copy, fill in the three gaps marked GAP, then run it as root:

    bufsize course starter my-work              # writes my-work/starter.py
    sudo .venv/bin/python my-work/starter.py --out my-work/results
    bufsize course check my-work/results        # grades the results against the committed runs

For each number of flows N it builds the dumbbell (HOSTS senders, RATE_MBPS, RTT_MS, Reno), starts N
long-lived TCP flows, and searches for the smallest buffer that keeps the bottleneck at TARGET
utilization, probing one buffer at a time in place. Everything but the gaps is given; `answers.json`
keeps every sample, so the checker can recompute each answer from what was measured.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bufsize import __version__
from bufsize.monitors.rate import sample_rates
from bufsize.scaffold.resultdir import check_out_dir
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.config import DumbbellConfig
from bufsize.topologies.dumbbell import Dumbbell
from bufsize.topologies.machine import delay_backend, require_root
from bufsize.topologies.proc import sleep_checked
from bufsize.topologies.safefiles import make_dirs, write_atomic
from bufsize.traffic.longflows import LongFlows

# The configuration the handout's questions and `bufsize course check` expect.
HOSTS, RATE_MBPS, RTT_MS, CC = 8, 20.0, 40.0, "reno"
FLOWS = (2, 8, 32)
TARGET = 0.99
SAMPLE_S = 0.5  # one rate sample: bytes through the bottleneck over half a second
PROBE_S = 6.0  # samples taken at each probed buffer (after SETTLE_S at it)
SETTLE_S = 2.0


# ---- GAP 1 -----------------------------------------------------------------------------------
def theory_packets(rtt_ms: float, rate_mbps: float, flows: int) -> float:
    """The buffer Appenzeller et al. predict for `flows` desynchronized flows, RTT*C/sqrt(N), in
    packets of FRAME_BYTES bytes (1514: a 1500-byte IP packet and its Ethernet header)."""
    raise NotImplementedError("GAP 1: theory_packets")


# ---- GAP 2 -----------------------------------------------------------------------------------
def utilization(rates_mbps: list[float], rate_mbps: float) -> float:
    """The share of the link's rate that the samples (Mb/s, equal lengths) carried, as a fraction."""
    raise NotImplementedError("GAP 2: utilization")


# ---- GAP 3 -----------------------------------------------------------------------------------
def smallest_buffer(probe: Callable[[int], float], lo: int, hi: int, target: float) -> int:
    """The smallest buffer in [lo, hi] packets whose utilization, probe(buffer), is at least
    `target`, by binary search (assume hi passes). Each probe costs PROBE_S + SETTLE_S seconds."""
    raise NotImplementedError("GAP 3: smallest_buffer")


# ---- given: the experiment ---------------------------------------------------------------------
def search_one(flows: int, backend: str, say: Callable[[str], None], probe_s: float, settle_s: float) -> dict:
    cfg = DumbbellConfig(hosts=HOSTS, rate_mbps=RATE_MBPS, rtt_ms=[RTT_MS] * HOSTS, cc=CC)
    bdp = math.ceil(cfg.bdp_bytes / FRAME_BYTES)
    probes: list[dict] = []
    with Dumbbell(cfg, backend) as net, LongFlows(net, flows) as running:

        def probe(buffer_packets: int) -> float:
            if not 1 <= buffer_packets <= 4 * bdp:
                raise ValueError(f"probe({buffer_packets}): buffers go from 1 to {4 * bdp} packets here")
            net.set_buffer(buffer_packets * FRAME_BYTES)
            sleep_checked(settle_s, net.check_alive)
            with net.bottleneck.counters() as counters:  # the samples search and measure take too
                got = sample_rates(
                    counters, round(probe_s / SAMPLE_S), SAMPLE_S, lambda t: sleep_checked(t, net.check_alive)
                )
            rates = [round(r, 4) for r in got.rates_mbps]
            running.check()
            u = utilization(rates, RATE_MBPS)
            probes.append({"buffer_packets": buffer_packets, "rates_mbps": rates, "utilization": u})
            say(f"  N={flows}: buffer {buffer_packets:4d} packets -> utilization {u:.2%}")
            return u

        net.set_buffer(bdp * FRAME_BYTES)
        sleep_checked(3.0, net.check_alive)  # slow start to a full pipe
        found = smallest_buffer(probe, 1, bdp, TARGET)
    return {
        "flows": flows,
        "bdp_packets": bdp,
        "theory_packets": theory_packets(RTT_MS, RATE_MBPS, flows),
        "found_packets": found,
        "probes": probes,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path, help="directory for answers.json (created)")
    p.add_argument(
        "--flows", default=",".join(map(str, FLOWS)), help="numbers of flows, comma separated (the handout's: 2,8,32)"
    )
    p.add_argument(
        "--probe-s", type=float, default=PROBE_S, help=f"seconds sampled per probe (the handout's: {PROBE_S:g})"
    )
    p.add_argument(
        "--settle-s", type=float, default=SETTLE_S, help=f"seconds before sampling (the handout's: {SETTLE_S:g})"
    )
    a = p.parse_args(argv)
    try:
        flows = [int(x) for x in a.flows.split(",")]
    except ValueError:
        p.error(f"--flows {a.flows}: whole numbers separated by commas")
    if not all(1 <= n <= 400 for n in flows) or not (SAMPLE_S <= a.probe_s <= 600 and 0 <= a.settle_s <= 600):
        p.error("--flows: 1 to 400 each; --probe-s: 0.5 to 600; --settle-s: 0 to 600")
    require_root()
    check_out_dir(a.out)
    make_dirs(a.out)
    backend = delay_backend("auto")
    t0 = time.monotonic()
    answers: dict = {
        "kit": "bufsize course starter",
        "bufsize_version": __version__,
        "config": {"hosts": HOSTS, "rate_mbps": RATE_MBPS, "rtt_ms": RTT_MS, "cc": CC, "target": TARGET},
        "timing": {"sample_s": SAMPLE_S, "probe_s": a.probe_s, "settle_s": a.settle_s},
        "delay_backend": backend,
        "points": [],
    }
    for n in flows:
        t = time.monotonic()
        print(f"N={n}: searching (about {8 * (a.probe_s + a.settle_s) + 10:.0f} s) ...", flush=True)
        point = search_one(n, backend, lambda s: print(s, flush=True), a.probe_s, a.settle_s)
        point["wall_s"] = round(time.monotonic() - t, 1)
        answers["points"].append(point)
        print(f"N={n}: smallest buffer {point['found_packets']} packets (theory {point['theory_packets']:.1f})")
        write_atomic(a.out / "answers.json", json.dumps(answers, indent=1))
    answers["wall_s"] = round(time.monotonic() - t0, 1)
    write_atomic(a.out / "answers.json", json.dumps(answers, indent=1))
    print(f"wrote {a.out / 'answers.json'}; grade it with: bufsize course check {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
