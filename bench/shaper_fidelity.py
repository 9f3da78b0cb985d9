"""How evenly the bottleneck releases packets, HTB against TBF, on this machine.

Builds the paper's dumbbell (62.5 Mb/s, 87 ms, a buffer of one BDP so the queue never empties),
runs two long Reno flows, and records every departure from the bottleneck port with the
net:net_dev_xmit tracepoint (in a private tracing instance). Gaps between consecutive full-size
departures are compared with the ideal frame time, 1514 B x 8 / C, as in design-notes section 2
and the 2012 Mininet-HiFi fidelity figure.

    .venv/bin/python bench/shaper_fidelity.py --out bench/results/shaper-fidelity.json
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
from bufsize.topologies import FRAME_BYTES  # noqa: E402
from bufsize.topologies.config import DumbbellConfig  # noqa: E402
from bufsize.topologies.dumbbell import Dumbbell  # noqa: E402
from bufsize.topologies.machine import delay_backend  # noqa: E402
from bufsize.traffic.longflows import LongFlows  # noqa: E402


def measure(shaper: str, burst: int, seconds: float) -> dict:
    cfg = DumbbellConfig(hosts=2, rtt_ms=[87.0, 87.0], shaper=shaper, burst_bytes=burst)
    with Dumbbell(cfg, delay_backend(cfg.delay_backend)) as net, LongFlows(net, 2):
        time.sleep(8)  # past slow start, queue standing
        fid, _ = fidelity.measure(net.bottleneck.dev, cfg.rate_mbps, seconds, net.state)
    if not fid["available"]:
        raise RuntimeError(f"no fidelity summary: {fid['reason']}")
    return {"shaper": shaper, "burst_bytes": burst} | {
        k: v for k, v in fid.items() if k not in ("available", "seconds")
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results/shaper-fidelity.json")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    if shutil.which("iperf") is None or os.geteuid() != 0:
        print("needs root and iperf (run ./setup.sh)", file=sys.stderr)
        return 2
    rows = []
    configs = [
        ("htb", FRAME_BYTES),
        ("htb", 2 * FRAME_BYTES),
        ("htb", 10 * FRAME_BYTES),
        ("tbf", FRAME_BYTES),
        ("tbf", 2 * FRAME_BYTES),
        ("tbf", 3 * FRAME_BYTES),
    ]
    for rep in range(a.repeats):
        for shaper, burst in configs:
            r = measure(shaper, burst, a.seconds) | {"repeat": rep + 1}
            rows.append(r)
            print(json.dumps(r), flush=True)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    res = {"date": time.strftime("%Y-%m-%d"), "kernel": os.uname().release, "rate_mbps": 62.5, "rows": rows}
    out.write_text(json.dumps(res, indent=1) + "\n")
    md = [
        "| shaper | burst B | run | median gap us (ideal) | gaps >10% off | >25% | >50% | >100% | rate from gaps |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    md += [
        f"| {r['shaper']} | {r['burst_bytes']} | {r['repeat']} | {r['median_gap_us']} ({r['ideal_us']}) "
        f"| {r['frac_gt10']:.1%} | {r['frac_gt25']:.1%} | {r['frac_gt50']:.1%} | {r['frac_gt100']:.1%} "
        f"| {r['rate_from_gaps_mbps']} |"
        for r in rows
    ]
    out.with_suffix(".md").write_text(
        f"# Bottleneck pacing fidelity, 62.5 Mb/s ({res['date']}, {res['kernel']})\n\n" + "\n".join(md) + "\n"
    )
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
