"""Does starting the fidelity trace stall the delay line? Its ring buffer at the old fixed size
(64 MB per CPU) against the size made for the trace (monitors/fidelity.py trace_buffer_kb),
alternating on one loaded line dumbbell.

The full sweep of 2026-11-25 had three line stalls (40-146 ms) after the scratch-file fix, all at
t = 13.0 s, when the 2 s fidelity trace starts; the kernel allocates the trace's ring buffer then,
in the middle of the run. Here one dumbbell carries long-lived flows through a full buffer while
the bench starts a FidelityMonitor every --every seconds (the real code path), alternating the two
buffer sizes, and samples the line's counters every 2 ms. A stall is a stretch of at least
--min-ms in which the line held frames but sent none; it belongs to a trace start if it begins
within 0.5 s after it. Resumable per run: finished runs are kept.

    .venv/bin/python bench/trace_alloc_stalls.py --runs 3 --out bench/results/trace-alloc-stalls
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.line_stalls import stretches  # noqa: E402
from bufsize.monitors.fidelity import FidelityMonitor, trace_buffer_kb  # noqa: E402
from bufsize.topologies import FRAME_BYTES  # noqa: E402
from bufsize.topologies.config import DumbbellConfig  # noqa: E402
from bufsize.topologies.dumbbell import Dumbbell  # noqa: E402
from bufsize.topologies.machine import delay_backend  # noqa: E402
from bufsize.traffic.longflows import LongFlows  # noqa: E402

OLD_KB = 65536
RATE_MBPS, RTT_MS = 62.5, 87.0
ATTRIBUTE_S = 0.5


def current_cpu() -> int:
    """The CPU this thread last ran on (field 39 of /proc/thread-self/stat)."""
    stat = Path("/proc/thread-self/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[36])


def sampler(net: Dumbbell, stop: threading.Event, out: list[tuple[float, int, int]]) -> None:
    with net.bottleneck.leaf_reader() as r:
        while not stop.is_set():
            s = r.read()
            out.append((s.t, s.bytes, s.qlen))
            time.sleep(0.002)


def run_one(a: argparse.Namespace, sized_kb: int) -> dict:
    hosts = min(a.flows, 100)
    cfg = DumbbellConfig(
        hosts=hosts, rate_mbps=RATE_MBPS, rtt_ms=[RTT_MS] * hosts, cc=a.cc,
        buffer_bytes=a.buffer_packets * FRAME_BYTES, shaper="line",
    )  # fmt: skip
    samples: list[tuple[float, int, int]] = []
    starts: list[dict] = []
    stop = threading.Event()
    with Dumbbell(cfg, delay_backend("delayline")) as net, LongFlows(net, a.flows):
        time.sleep(a.warmup)
        th = threading.Thread(target=sampler, args=(net, stop, samples), daemon=True)
        th.start()
        try:
            time.sleep(1.0)
            for i in range(2 * a.starts):
                arm, kb = ("old", OLD_KB) if i % 2 == 0 else ("sized", sized_kb)
                t0 = time.monotonic()
                with FidelityMonitor(net.bottleneck.dev, RATE_MBPS, net.state, buffer_kb=kb) as mon:
                    t1 = time.monotonic()
                    cpu = current_cpu()
                    line_cpu = net.delayline.cpu if net.delayline else None
                    time.sleep(a.trace)
                    fid, _ = mon.stop()
                starts.append({"arm": arm, "kb": kb, "t": t0, "start_ms": round(1e3 * (t1 - t0), 2), "cpu": cpu,
                               "on_line_cpu": cpu == line_cpu,
                               "frac_gt10": fid.get("frac_gt10"), "overruns": fid.get("overruns")})  # fmt: skip
                time.sleep(max(0.0, a.every - (time.monotonic() - t0)))
        finally:
            stop.set()
            th.join()
    found = stretches(samples, a.min_ms / 1000)
    for s in starts:
        mine = [length for t, length in found if s["t"] <= t <= s["t"] + ATTRIBUTE_S]
        s["stalls"], s["longest_ms"] = len(mine), round(1e3 * max(mine, default=0.0), 1)
    attributed = {t for s in starts for t, _ in found if s["t"] <= t <= s["t"] + ATTRIBUTE_S}
    other = [length for t, length in found if t not in attributed]
    span = samples[-1][0] - samples[0][0] if samples else 0.0
    longest = round(1e3 * max(other, default=0.0), 1)
    return {"starts": starts, "stalls_elsewhere": len(other), "longest_elsewhere_ms": longest,
            "sampled_s": round(span, 1), "samples": len(samples)}  # fmt: skip


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3g} [{min(xs):.3g}..{max(xs):.3g}]" if xs else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="dumbbells, one after another")
    ap.add_argument("--starts", type=int, default=10, help="trace starts per size per run")
    ap.add_argument("--flows", type=int, default=800)
    ap.add_argument("--cc", default="reno")
    ap.add_argument("--buffer-packets", type=int, default=449)
    ap.add_argument("--warmup", type=float, default=15.0)
    ap.add_argument("--trace", type=float, default=2.0, help="seconds each trace runs (as a search's)")
    ap.add_argument("--every", type=float, default=4.0, help="seconds between trace starts")
    ap.add_argument("--min-ms", type=float, default=10.0, help="shortest stretch counted as a stall")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    sized = trace_buffer_kb(RATE_MBPS, a.trace)
    runs = []
    for i in range(1, a.runs + 1):
        f = a.out / f"run{i}.json"
        if not f.exists():
            t0 = time.time()
            r = run_one(a, sized) | {"wall_s": round(time.time() - t0, 1)}
            f.write_text(json.dumps(r, indent=1))
            print(f"run {i}: {sum(s['stalls'] for s in r['starts'])} stalls at trace starts, "
                  f"{r['stalls_elsewhere']} elsewhere, {r['wall_s']} s", flush=True)  # fmt: skip
        runs.append(json.loads(f.read_text()))
    lines = [
        f"{a.flows} {a.cc} flows, {a.buffer_packets}-packet buffer, line shaper, {RATE_MBPS} Mb/s, {RTT_MS:g} ms; "
        f"stalls of {a.min_ms:g} ms or more within {ATTRIBUTE_S} s of a trace start; {len(runs)} runs",
        "",
        "| ring buffer per CPU | trace starts | starts with a stall | stalls | longest ms "
        "| time to start the trace ms | started on the line's CPU | overruns |",
        "|---" * 8 + "|",
    ]
    for arm, kb in (("old", OLD_KB), ("sized", sized)):
        ss = [s for r in runs for s in r["starts"] if s["arm"] == arm]
        lines.append(
            f"| {kb} KB ({arm}) | {len(ss)} | {sum(s['stalls'] > 0 for s in ss)} | {sum(s['stalls'] for s in ss)} | "
            f"{max((s['longest_ms'] for s in ss), default=0):g} | {spread([s['start_ms'] for s in ss])} | "
            f"{sum(bool(s['on_line_cpu']) for s in ss)} | {sum(s['overruns'] or 0 for s in ss)} |"
        )
    lines.append("")
    lines.append(f"Stalls away from trace starts: {sum(r['stalls_elsewhere'] for r in runs)} "
                 f"(longest {max(r['longest_elsewhere_ms'] for r in runs):g} ms) "
                 f"in {sum(r['sampled_s'] for r in runs):.0f} s sampled.")  # fmt: skip
    (a.out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
