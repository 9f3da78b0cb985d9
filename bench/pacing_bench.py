"""Pacing fidelity at the bottleneck: variants side by side, interleaved, on one dumbbell per row.

Metric as in monitors/fidelity.py: every departure of a full-size frame from the bottleneck
device (net:net_dev_xmit), gaps in busy periods, fraction more than 10 % / 25 % off the ideal frame
time 1514 B x 8 / C, and the rate implied by the mean gap. Each row (flows @ rate) builds one
dumbbell, warms up, then measures the variants in turn (A, B, C, A, B, C, ... with the order
rotated every repeat) so that noise from other work on the machine hits all of them alike.
Variants switch at run time, on the same flows:

    base    the kernel shaper alone (HTB's watchdog hrtimer releases each frame)
    pmqos   /dev/cpu_dma_latency held at 0: idle vCPUs poll instead of halting
    pace    the delay line's pacer kicks the qdisc at each frame time (topologies/delay.py)

and combinations joined with "+". The dumbbell is built with the pacer (DumbbellConfig.pacer) and
the variants without it switch it off at run time (SIGUSR1 to the delay line). The bottleneck
device is named after the run (s1-<run id>), so other runs' departures no longer pass the
tracepoint filter; a sample with more departures than the rate allows is still retaken (up to
--retries times) and marked.

    .venv/bin/python bench/pacing_bench.py --out bench/results/pacing.json
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bufsize.monitors.fidelity import FidelityMonitor, FidelityUnavailable, summarize  # noqa: E402
from bufsize.topologies import FRAME_BYTES  # noqa: E402
from bufsize.topologies.config import DumbbellConfig  # noqa: E402
from bufsize.topologies.dumbbell import Dumbbell  # noqa: E402
from bufsize.topologies.machine import delay_backend  # noqa: E402
from bufsize.traffic.longflows import LongFlows  # noqa: E402

KNOWN = {"base", "pmqos", "pace"}


class PmQos:
    """Holds a CPU latency request of 0 us (cpuidle then only polls) while switched on."""

    def __init__(self) -> None:
        self.fd: int | None = None

    def set(self, on: bool) -> None:
        if on and self.fd is None:
            self.fd = os.open("/dev/cpu_dma_latency", os.O_WRONLY)
            os.write(self.fd, (0).to_bytes(4, "little"))
        elif not on and self.fd is not None:
            os.close(self.fd)
            self.fd = None


def parse_rows(spec: str) -> list[tuple[int, float]]:
    rows = []
    for item in spec.split(","):
        flows, _, rate = item.partition("@")
        rows.append((int(flows), float(rate)))
    return rows


def measure_row(
    flows: int, rate: float, variants: list[str], a: argparse.Namespace, pm: PmQos
) -> tuple[list[dict], dict]:
    hosts = min(flows, a.max_hosts)
    buffer_bytes = max(10 * FRAME_BYTES, int(a.buffer_bdp * rate * 1e6 / 8 * a.rtt_ms / 1000))
    cfg = DumbbellConfig(
        hosts=hosts, rate_mbps=rate, rtt_ms=[a.rtt_ms] * hosts, cc=a.cc, buffer_bytes=buffer_bytes, pacer=True
    )
    out: list[dict] = []
    with Dumbbell(cfg, delay_backend("delayline")) as net, LongFlows(net, flows):
        assert net.delayline is not None and net.pacing
        time.sleep(a.warmup)
        for rep in range(a.repeats):
            k = rep % len(variants)
            for v in variants[k:] + variants[:k]:
                parts = set(v.split("+"))
                pm.set("pmqos" in parts)
                net.delayline.set_pacing("pace" in parts)
                time.sleep(a.settle)
                for attempt in range(a.retries + 1):
                    kicks0 = net.delayline.stats().get("pacer", {})
                    with FidelityMonitor(net.bottleneck.dev, rate, net.state, a.trace) as mon:
                        time.sleep(a.trace)
                        _, times = mon.stop()
                    kicks1 = net.delayline.stats().get("pacer", {})
                    # More departures than C allows: the trace is not this bottleneck's alone.
                    too_many = len(times) > 1.02 * a.trace * rate * 1e6 / 8 / FRAME_BYTES
                    if not too_many or attempt == a.retries:
                        break
                    time.sleep(a.wait_other)
                row = {"flows": flows, "rate_mbps": rate, "variant": v, "repeat": rep + 1}
                row |= {"too_many_departures": too_many, "loadavg_1min": round(os.getloadavg()[0], 2)}
                try:
                    row |= summarize(times, rate)
                except FidelityUnavailable as e:
                    row["error"] = str(e)
                if kicks0 and kicks1:
                    row["kicks"] = kicks1["kicks"] - kicks0["kicks"]
                    row["kick_hits"] = kicks1["hits"] - kicks0["hits"]
                out.append(row)
                print(json.dumps(row), flush=True)
        pm.set(False)
        info = {"hosts": hosts, "buffer_bytes": buffer_bytes, "delayline": net.delayline.stats()}
    return out, info


def summary(rows: list[dict]) -> list[dict]:
    keys = sorted({(r["flows"], r["rate_mbps"], r["variant"]) for r in rows}, key=lambda k: (k[1], k[0]))
    res = []
    for flows, rate, v in keys:
        rs = [r for r in rows if (r["flows"], r["rate_mbps"], r["variant"]) == (flows, rate, v) and "error" not in r]
        clean = [r for r in rs if not r["too_many_departures"]]
        use = clean or rs
        if not use:
            continue
        s: dict = {"flows": flows, "rate_mbps": rate, "variant": v, "n": len(use), "n_clean": len(clean)}
        for m in ("frac_gt10", "frac_gt25", "rate_from_gaps_mbps"):
            vals = [r[m] for r in use]
            s[m] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
        res.append(s)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="20@62.5,200@62.5,800@62.5,20@155,20@200", help="flows@Mb/s,...")
    ap.add_argument("--variants", default="base,pace")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds after all flows send")
    ap.add_argument("--settle", type=float, default=0.5, help="seconds after switching variant")
    ap.add_argument("--trace", type=float, default=3.0, help="seconds traced per sample")
    ap.add_argument("--retries", type=int, default=2, help="retakes of a sample with too many departures")
    ap.add_argument("--wait-other", type=float, default=3.0)
    ap.add_argument("--buffer-bdp", type=float, default=2.0, help="bottleneck buffer in BDPs")
    ap.add_argument("--rtt-ms", type=float, default=87.0)
    ap.add_argument("--cc", default="cubic")
    ap.add_argument("--max-hosts", type=int, default=100)
    ap.add_argument("--out", default="bench/results/pacing.json")
    a = ap.parse_args()
    if shutil.which("iperf") is None or os.geteuid() != 0:
        print("needs root and iperf (run ./setup.sh)", file=sys.stderr)
        return 2
    variants = a.variants.split(",")
    for v in variants:
        if not set(v.split("+")) <= KNOWN:
            ap.error(f"unknown variant {v} (known: {', '.join(sorted(KNOWN))}, joined with +)")
    t0 = time.monotonic()
    load0 = os.getloadavg()
    pm = PmQos()
    rows: list[dict] = []
    infos = []
    try:
        for flows, rate in parse_rows(a.rows):
            r, info = measure_row(flows, rate, variants, a, pm)
            rows += r
            infos.append({"flows": flows, "rate_mbps": rate} | info)
    finally:
        pm.set(False)
    wall = time.monotonic() - t0
    res = {
        "command": "bench/pacing_bench.py " + shlex.join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "kernel": os.uname().release,
        "wall_seconds": round(wall),
        "loadavg_start": [round(x, 2) for x in load0],
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "settings": vars(a),
        "rows": infos,
        "samples": rows,
        "summary": summary(rows),
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    md = [
        "| flows | C Mb/s | variant | samples (clean) | gaps >10% off: median [min..max] | >25% | rate from gaps |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in res["summary"]:
        f10, f25, rg = s["frac_gt10"], s["frac_gt25"], s["rate_from_gaps_mbps"]
        md.append(
            f"| {s['flows']} | {s['rate_mbps']:g} | {s['variant']} | {s['n']} ({s['n_clean']}) "
            f"| {f10['median']:.1%} [{f10['min']:.1%}..{f10['max']:.1%}] "
            f"| {f25['median']:.1%} [{f25['min']:.1%}..{f25['max']:.1%}] "
            f"| {rg['median']:.2f} [{rg['min']:.2f}..{rg['max']:.2f}] |"
        )
    head = (
        f"# Bottleneck pacing variants, interleaved ({res['date']}, {res['kernel']})\n\n"
        f"Command: `.venv/bin/python {res['command']}`  \n"
        f"Wall time {wall / 60:.1f} min; load average at start {res['loadavg_start']}, at end {res['loadavg_end']}.\n\n"
    )
    out.with_suffix(".md").write_text(head + "\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
