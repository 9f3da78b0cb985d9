"""The course kit's example: the toolkit's public API in one short script.

    sudo .venv/bin/python -m bufsize.course.example            # about 15 s on a 2-core VM
    sudo .venv/bin/python -m bufsize.course.example --search   # plus one buffer search, a few minutes

It builds a small dumbbell (4 senders, 20 Mb/s, 40 ms), pings through Mininet's API, starts 8
long-lived TCP flows, watches rate and queue at one bandwidth-delay product of buffer, cuts the buffer
to RTT*C/sqrt(n) in place and watches again, then (with --search) asks for the smallest buffer that
keeps 99 % of the link busy. Students replace pieces of it: their own monitor, their own search.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys

from bufsize.longlived.search import SearchOptions, run_search
from bufsize.mininet.adapter import make_view
from bufsize.monitors.live import monitor
from bufsize.scaffold.runs import Emulated
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.config import DumbbellConfig
from bufsize.topologies.dumbbell import Dumbbell
from bufsize.topologies.machine import delay_backend, require_root
from bufsize.topologies.proc import sleep_checked
from bufsize.traffic.longflows import LongFlows

HOSTS, FLOWS, RATE_MBPS, RTT_MS = 4, 8, 20.0, 40.0
WATCH_S = 3.0


def utilization(rows: list[dict]) -> float:
    return statistics.mean(r["rate_mbps"] for r in rows) / RATE_MBPS


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--search", action="store_true", help="also run one buffer search (a few minutes)")
    a = p.parse_args(argv)
    require_root()
    cfg = DumbbellConfig(hosts=HOSTS, rate_mbps=RATE_MBPS, rtt_ms=[RTT_MS] * HOSTS, cc="reno")
    bdp_packets = cfg.bdp_bytes / FRAME_BYTES  # a property: bytes in flight at the rate over one RTT
    small_packets = max(2, round(bdp_packets / math.sqrt(FLOWS)))

    # 1. Build: the dumbbell is a context manager; leaving the block removes everything it made.
    with Dumbbell(cfg, delay_backend("auto")) as net:
        # 2. Mininet's API on the same namespaces.
        with make_view(net) as view:
            out = view.get("h1").cmd(f"ping -n -c 3 -i 0.2 {net.receiver_ip}")
            rtts = [float(t) for t in re.findall(r"time=([\d.]+) ms", out)]
            print(f"ping h1 -> r1: {rtts} ms (configured {RTT_MS:g})")

        # 3. Long-lived flows, spread over the hosts; the block ends them.
        with LongFlows(net, FLOWS) as flows:
            sleep_checked(3.0, net.check_alive)  # slow start to a full pipe
            # 4. Rate and queue at one BDP of buffer.
            print(f"\nbuffer {net.buffer_bytes} B ({bdp_packets:.0f} packets = RTT*C):")
            big = monitor(net, WATCH_S, sys.stdout)
            # 5. Cut the buffer in place: the flows keep running through the same shaper.
            net.set_buffer(small_packets * FRAME_BYTES)
            sleep_checked(2.0, net.check_alive)
            print(f"\nbuffer {net.buffer_bytes} B ({small_packets} packets = RTT*C/sqrt({FLOWS})):")
            small = monitor(net, WATCH_S, sys.stdout)
            flows.check()
        print(f"\nutilization: {utilization(big):.1%} at RTT*C, {utilization(small):.1%} at RTT*C/sqrt(n)")
        print(f"peak queue: {max(r['qlen'] for r in big)} and {max(r['qlen'] for r in small)} packets")

    # 6. A search builds its own dumbbell and returns a result dictionary (as `bufsize search` writes).
    if a.search:
        result = run_search(cfg, Emulated(delay_backend("auto")), SearchOptions(flows=FLOWS, samples=3))
        print(f"\nsmallest buffer for 99 %: {result['buffer_packets']} packets (theory {small_packets})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
