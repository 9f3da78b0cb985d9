"""How long the flow checks take through `ss` in the namespace (one process per look) and through
sock_diag netlink (topologies/sockdiag.py), on a live dumbbell with long-lived flows.

Two looks, as the toolkit makes them: the receiver's established connections (polled every 50 ms
while flows come up, and at every check of a run), and every sender namespace's connections with
their TCP info (congestion control and bytes acknowledged, once per host per look). Each is timed
--repeats times, interleaved (ss, netlink, ss, ...) so both see the same machine; median and range.

    .venv/bin/python bench/sockdiag_vs_ss.py --flows 200 --hosts 100 --out bench/results/sockdiag-vs-ss.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from bufsize.topologies import netns
from bufsize.topologies.config import DumbbellConfig
from bufsize.topologies.dumbbell import Dumbbell
from bufsize.topologies.machine import delay_backend, require_root
from bufsize.topologies.proc import run
from bufsize.topologies.sockdiag import tcp_sockets
from bufsize.traffic.longflows import LongFlows


def via_ss_receiver(net: Dumbbell, ports: list[int]) -> int:
    flt = " or ".join(f"sport = :{p}" for p in ports)
    out = run(netns.in_ns(net.receiver_ns, ["ss", "-Htn", "state", "established", f"( {flt} )"])).stdout
    return sum(1 for line in out.splitlines() if line.strip())


def via_netlink_receiver(net: Dumbbell, ports: list[int]) -> int:
    wanted = set(ports)
    return sum(1 for s in tcp_sockets(net.receiver_ns) if s.sport in wanted)


def via_ss_senders(net: Dumbbell, ports: list[int]) -> int:
    flt = " or ".join(f"dport = :{p}" for p in ports)
    outs = [run(netns.in_ns(h.ns, ["ss", "-Htin", "state", "established", f"( {flt} )"])).stdout for h in net.hosts]
    return sum(o.count("bytes_acked:") for o in outs)


def via_netlink_senders(net: Dumbbell, ports: list[int]) -> int:
    wanted = set(ports)
    return sum(1 for h in net.hosts for s in tcp_sockets(h.ns, info=True) if s.dport in wanted)


def timed(f, *args) -> tuple[float, int]:  # noqa: ANN001
    t = time.perf_counter()
    n = f(*args)
    return (time.perf_counter() - t) * 1e3, n


def summary(ms: list[float]) -> dict:
    return {"median_ms": round(statistics.median(ms), 2), "min_ms": round(min(ms), 2), "max_ms": round(max(ms), 2)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--flows", type=int, default=200)
    p.add_argument("--hosts", type=int, default=100)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    require_root()
    cfg = DumbbellConfig(hosts=a.hosts, rate_mbps=62.5, rtt_ms=[87.0] * a.hosts, cc="cubic")
    out: dict = {"flows": a.flows, "hosts": a.hosts, "repeats": a.repeats}
    with Dumbbell(cfg, delay_backend("auto")) as net, LongFlows(net, a.flows) as flows:
        time.sleep(3.0)
        for look, (ss, nl) in {
            "receiver_established": (via_ss_receiver, via_netlink_receiver),
            "senders_with_info": (via_ss_senders, via_netlink_senders),
        }.items():
            t_ss, t_nl, counts = [], [], set()
            for _ in range(a.repeats):
                ms, n1 = timed(ss, net, flows.ports)
                t_ss.append(ms)
                ms, n2 = timed(nl, net, flows.ports)
                t_nl.append(ms)
                counts.add((n1, n2))
            out[look] = {"ss": summary(t_ss), "netlink": summary(t_nl), "counts_ss_netlink": sorted(counts)}
            print(look, json.dumps(out[look]), flush=True)
    if a.out:
        a.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
