"""What the monitors cost, and how faithful the link is, at 20, 200 and 800 flows.

For each shaper setting and number of flows: build the paper's dumbbell (62.5 Mb/s, 87 ms,
min(N, 400) hosts, a buffer of 2 BDP so busy periods are long), start N cubic flows, let them
settle, then run the recorder (queue at 100 Hz, rate, cwnd of every flow from tcp:tcp_probe, CPU
per core) for `--seconds`, with a net:net_dev_xmit fidelity trace in the middle. Reports the
recorder thread's own CPU time as a share of one core (goal: under 5 %; the kernel's cost of the
tracepoints is not in it) and the fidelity summary beside the 2012 emulator's numbers.

    .venv/bin/python bench/monitors_bench.py --out bench/results/monitors.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bufsize.monitors import fidelity  # noqa: E402
from bufsize.monitors.recorder import Recorder, summary  # noqa: E402
from bufsize.topologies import FRAME_BYTES  # noqa: E402
from bufsize.topologies.config import DumbbellConfig  # noqa: E402
from bufsize.topologies.dumbbell import Dumbbell  # noqa: E402
from bufsize.topologies.machine import delay_backend  # noqa: E402
from bufsize.traffic.longflows import LongFlows  # noqa: E402

REF_2012 = Path(__file__).resolve().parents[1] / "results" / "reference" / "mininet-hifi-2012-dequeue-fidelity.tsv"


def point(flows: int, shaper: str, burst: int, seconds: float, settle: float) -> dict:
    hosts = min(flows, 400)
    cfg = DumbbellConfig(hosts=hosts, rtt_ms=[87.0] * hosts, shaper=shaper, burst_bytes=burst, cc="cubic")
    cfg = DumbbellConfig(**(cfg.to_dict() | {"buffer_bytes": 2 * (cfg.bdp_bytes // FRAME_BYTES) * FRAME_BYTES}))
    t0 = time.monotonic()
    with Dumbbell(cfg, delay_backend(cfg.delay_backend)) as net, LongFlows(net, flows) as fl:
        built = time.monotonic() - t0
        time.sleep(settle)
        ports = range(min(fl.ports), max(fl.ports) + 1)
        rec = Recorder(net.bottleneck, ports, net.state).start()
        try:
            time.sleep(seconds / 2 - 2.5)
            fid, _ = fidelity.measure(net.bottleneck.dev, cfg.rate_mbps, 5.0, net.state)
            time.sleep(seconds / 2 - 2.5)
        finally:
            recording = rec.stop()
    s = summary(recording)
    return {
        "flows": flows,
        "hosts": hosts,
        "shaper": shaper,
        "burst_bytes": burst,
        "setup_s": round(built, 1),
        "monitor_cpu_share_of_one_core": s["monitor_cpu_share_of_one_core"],
        "queue_rate_hz": s["queue"]["rate_hz"],
        "queue_max_sample_gap_ms": s["queue"]["max_sample_gap_ms"],
        "cwnd_flows_seen": s["cwnd"]["flows_seen"],
        "cwnd_trace_overruns": s["cwnd"]["trace_overruns"],
        "rate_mbps_mean": s.get("rate_mbps_mean"),
        "cpu_min_idle_per_second": s["cpu"]["min_idle_share_per_second"],
        "fidelity": fid,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results/monitors.json")
    ap.add_argument("--flows", default="20,200,800")
    ap.add_argument("--shapers", default="htb:1514,htb:3028", help="shaper:burst_bytes list")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--settle", type=float, default=15.0)
    a = ap.parse_args()
    if shutil.which("iperf") is None or os.geteuid() != 0:
        print("needs root and iperf (run ./setup.sh)", file=sys.stderr)
        return 2
    rows = []
    t_all = time.monotonic()
    for spec in a.shapers.split(","):
        shaper, burst = spec.split(":")
        for n in map(int, a.flows.split(",")):
            r = point(n, shaper, int(burst), a.seconds, a.settle)
            rows.append(r)
            print(json.dumps(r), flush=True)
    ref = fidelity.reference_2012(REF_2012)
    res = {
        "date": time.strftime("%Y-%m-%d"),
        "kernel": os.uname().release,
        "wall_s": round(time.monotonic() - t_all),
        "seconds_recorded": a.seconds,
        "rows": rows,
        "reference_2012": ref,
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    by_flows = {int(r["flows"]): r for r in ref}
    md = [
        "| flows | shaper, burst | monitor CPU (one core) | queue Hz | flows with an ACK in the 30 s | min idle/s "
        "| gaps >10% off | >25% | >50% | >100% | 2012 >10% | >25% | >50% |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        f, old = r["fidelity"], by_flows.get(r["flows"], {})
        fd = (
            f"{f['frac_gt10']:.1%} | {f['frac_gt25']:.1%} | {f['frac_gt50']:.1%} | {f['frac_gt100']:.2%}"
            if f.get("available")
            else "n/a | | |"
        )
        olds = " | ".join(f"{old[k]:.1%}" if k in old else "" for k in ("frac_gt10", "frac_gt25", "frac_gt50"))
        md.append(
            f"| {r['flows']} | {r['shaper']} {r['burst_bytes']} B | {r['monitor_cpu_share_of_one_core']:.1%} "
            f"| {r['queue_rate_hz']} | {r['cwnd_flows_seen']} | {r['cpu_min_idle_per_second']:.0%} | {fd} | {olds} |"
        )
    out.with_suffix(".md").write_text(
        f"# Monitor cost and link fidelity ({res['date']}, kernel {res['kernel']}, {a.seconds:g} s recorded per row, "
        f"{res['wall_s']} s in all)\n\n" + "\n".join(md) + "\n"
    )
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
