"""Benchmark: 800 long-lived flows over 400 hosts and over 2 hosts at 62.5 Mb/s, 87 ms.

Records the time from starting the traffic until all 800 are established and until they are all
sending (iperf's common first write), the memory the run takes (system memory in use and the RSS of
the processes it started), CPU busy/softirq over 10 s of traffic, and the bottleneck rate.

    .venv/bin/python bench/traffic_bench.py --out bench/results/traffic.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bufsize.topologies.config import DumbbellConfig, parse_rtts  # noqa: E402
from bufsize.topologies.counters import rate_mbps  # noqa: E402
from bufsize.topologies.dumbbell import Dumbbell  # noqa: E402
from bufsize.topologies.machine import delay_backend  # noqa: E402
from bufsize.traffic.longflows import LongFlows  # noqa: E402


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def one(flows: int, hosts: int, seconds: float) -> dict:
    cfg = DumbbellConfig(hosts=hosts, rtt_ms=parse_rtts("87", hosts))
    mem0 = psutil.virtual_memory().used
    t0 = time.monotonic()
    with Dumbbell(cfg, delay_backend(cfg.delay_backend)) as net:
        built = time.monotonic() - t0
        t1 = time.monotonic()
        with LongFlows(net, flows) as lf:
            sending = time.monotonic() - t1
            info = lf.start_info
            counters = net.bottleneck.counters()
            psutil.cpu_times_percent(None)
            a = counters.read()
            time.sleep(seconds)
            b = counters.read()
            cpu = psutil.cpu_times_percent(None)
            counters.close()
            lf.check()
            mem = (psutil.virtual_memory().used - mem0) / 2**20
            procs = rss_mb([p["pid"] for p in net.state.processes])
    return {
        "flows": flows,
        "hosts": hosts,
        "build_s": round(built, 2),
        "all_established_s": info.seconds_to_all_established,
        "all_sending_s": round(sending, 2),
        "held_until_all_up": info.held_until_all_up,
        "rate_mbps": round(rate_mbps(a, b), 2),
        "cpu_busy_pct": round(100 - cpu.idle, 1),
        "cpu_softirq_pct": round(cpu.softirq, 1),
        "memory_used_mb": round(mem, 1),
        "process_rss_mb": round(procs, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results/traffic.json")
    ap.add_argument("--seconds", type=float, default=10.0)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("run as root", file=sys.stderr)
        return 2
    rows = []
    for flows, hosts in ((800, 400), (800, 2)):
        r = one(flows, hosts, a.seconds)
        print(json.dumps(r), flush=True)
        rows.append(r)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    res = {"date": time.strftime("%Y-%m-%d"), "kernel": os.uname().release, "cores": os.cpu_count(), "rows": rows}
    out.write_text(json.dumps(res, indent=1) + "\n")
    md = [
        f"# 800 long-lived flows, 62.5 Mb/s, 87 ms ({res['date']}, {res['kernel']}, {res['cores']} cores)",
        "",
        "| flows | hosts | build s | all established s | all sending s | held | rate Mb/s | CPU busy % "
        "| softirq % | memory MB | RSS of run's processes MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    md += [
        f"| {r['flows']} | {r['hosts']} | {r['build_s']} | {r['all_established_s']} | {r['all_sending_s']} "
        f"| {r['held_until_all_up']} | {r['rate_mbps']} | {r['cpu_busy_pct']} | {r['cpu_softirq_pct']} "
        f"| {r['memory_used_mb']} | {r['process_rss_mb']} |"
        for r in rows
    ]
    out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
