"""The arrival process at the bottleneck, emulated and simulated, at the same N and buffer: how
bursty is it, and how much of the utilization gap at the many-flow plateau does it explain?

At N = 200 and 5 packets the twin keeps the line 99 % busy and the emulation 91-92 %, at the same
loss (15 %); issue 34 asks why. Each run here traces every packet offered to the bottleneck for a
few seconds (emulated: the net_dev_xmit tracepoint on the switch's port into the line; twin: the
FIFO's enqueue attempts), then reports

- gaps: the share of inter-arrival gaps under 15 us (back to back at 1 Gb/s) and under half a
  service time;
- the index of dispersion (variance / mean) of arrivals counted in bins of 1, 10 and 100 ms (1 for
  Poisson arrivals, 0 for a perfectly even stream, large for bursts);
- replay: the same arrival times fed to a drop-tail FIFO of B packets served at exactly C, offline:
  the share of time it is busy. If each testbed's replay matches its own measured utilization, the
  arrival process alone sets it; the two replays then say how far apart the two processes are.

Run with the machine otherwise idle (the emulated half is real traffic). Resumable per run.

    .venv/bin/python bench/arrival_burstiness.py --out bench/results/plateau/arrivals --rounds 2
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import time
from collections import deque
from pathlib import Path

from bufsize.monitors.fidelity import FidelityMonitor
from bufsize.topologies import FRAME_BYTES, netns
from bufsize.topologies.config import DumbbellConfig, parse_rtts
from bufsize.topologies.dumbbell import Dumbbell
from bufsize.topologies.nssim import SimConfig, SimDumbbell
from bufsize.topologies.proc import run
from bufsize.traffic.longflows import LongFlows

RATE_MBPS, RTT_MS = 62.5, 87.0
SERVICE_S = FRAME_BYTES * 8 / (RATE_MBPS * 1e6)
POINTS = [(200, 200, 5), (800, 400, 4)]  # flows, hosts, buffer packets: where the plateau is
WARM_S, SETTLE_S, TRACE_S = 20.0, 10.0, 4.0
COMMON_LOADS = (1.1, 1.2)


def replay_busy(times: list[float], buffer_packets: int, service_s: float = SERVICE_S) -> dict:
    """A drop-tail FIFO of `buffer_packets` waiting (the one in service not counted, as the line and
    ns-3's device both count) served at exactly `service_s` per frame, fed with `times`: the share
    of the span it is busy and the share of arrivals it drops."""
    in_system: deque[float] = deque()  # finish times of the frame in service and those waiting
    served = drops = 0
    for t in times:
        while in_system and in_system[0] <= t:
            in_system.popleft()
        if len(in_system) > buffer_packets:  # one in service, buffer_packets waiting
            drops += 1
            continue
        in_system.append(max(t, in_system[-1] if in_system else t) + service_s)
        served += 1
    span = times[-1] - times[0]
    return {"busy": round(min(1.0, served * service_s / span), 4), "drops": round(drops / len(times), 4)}


def burstiness(times: list[float], buffer_packets: int) -> dict:
    times = sorted(times)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    span = times[-1] - times[0]
    out = {
        "arrivals": len(times),
        "offered_load": round(len(times) * SERVICE_S / span, 4),
        "gaps_lt_15us": round(sum(g < 15e-6 for g in gaps) / len(gaps), 4),
        "gaps_lt_half_service": round(sum(g < SERVICE_S / 2 for g in gaps) / len(gaps), 4),
    }
    for ms in (1, 10, 100):
        width = ms / 1000
        bins = [0] * int(span / width)
        for t in times:
            i = int((t - times[0]) / width)
            if i < len(bins):
                bins[i] += 1
        mean = statistics.fmean(bins)
        out[f"idc_{ms}ms"] = round(statistics.pvariance(bins) / mean, 3) if mean else None
    out |= {f"replay_{k}": v for k, v in replay_busy(times, buffer_packets).items()}
    # The same arrivals with time stretched or squeezed to a common offered load: the bursts' shape
    # kept, the rate changed. Equal here means the shape does not matter, only how much is offered.
    for load in COMMON_LOADS:
        scale = out["offered_load"] / load
        out[f"busy_at_load_{load:g}"] = replay_busy([t * scale for t in times], buffer_packets)["busy"]
    return out


def emulated(flows: int, hosts: int, buffer_packets: int, variant: str) -> tuple[list[float], dict]:
    bdp = round(RATE_MBPS * 1e6 / 8 * RTT_MS / 1000 / FRAME_BYTES)
    # quickack: the receiver ACKs every segment at once (--delayed-ack off, the route's quickack metric);
    # paced: each sender's TCP paces its flow (--sender-pacing on).
    cfg = DumbbellConfig(hosts=hosts, rate_mbps=RATE_MBPS, rtt_ms=parse_rtts(str(RTT_MS), hosts),
                         buffer_bytes=2 * bdp * FRAME_BYTES, cc="reno", delayed_ack=variant != "quickack",
                         sender_pacing=variant == "paced")  # fmt: skip
    with Dumbbell(cfg, "delayline") as net:
        if variant == "nocompsack":
            # Only Linux's SACK compression off (quickack turns it off too: an immediate ACK
            # never waits): with out-of-order data queued, the receiver otherwise holds SACKs
            # up to 1 ms (5 % of the RTT at most) and sends one for up to 44 segments.
            run(netns.in_ns(net.receiver_ns, ["sysctl", "-q", "-w", "net.ipv4.tcp_comp_sack_nr=0"]))
        with LongFlows(net, flows) as lf:
            return _emulated_trace(net, lf, buffer_packets)


def _emulated_trace(net: Dumbbell, lf: LongFlows, buffer_packets: int) -> tuple[list[float], dict]:
    time.sleep(WARM_S)
    net.set_buffer(buffer_packets * FRAME_BYTES)
    time.sleep(SETTLE_S)
    counters = net.bottleneck.counters()
    sent0 = counters.read().tx_bytes
    t0 = time.monotonic()
    # Arrivals at the line are the switch's transmissions on its port into it.
    with FidelityMonitor(net.plan.bottleneck_dev, RATE_MBPS * 1.5, net.state, TRACE_S) as mon:
        time.sleep(TRACE_S)
        summary, times = mon.stop()
    util = (counters.read().tx_bytes - sent0) * 8 / (time.monotonic() - t0) / (RATE_MBPS * 1e6)
    counters.close()
    lf.check()
    if not summary.get("available") or summary.get("overruns"):
        raise RuntimeError(f"arrival trace incomplete: {summary}")
    return times, {"measured_util": round(util, 4)}


def simulated(flows: int, hosts: int, buffer_packets: int, variant: str) -> tuple[list[float], dict]:
    cfg = SimConfig(hosts, RATE_MBPS, parse_rtts(str(RTT_MS), hosts), "reno")
    bdp = round(cfg.bdp_bytes / FRAME_BYTES)
    with SimDumbbell(cfg, flows, 2 * bdp) as net:
        net.run(WARM_S)
        net.set_buffer(buffer_packets)
        net.run(SETTLE_S)
        times = net.arrivals(TRACE_S)
        iv = net.run(TRACE_S)  # the utilization right after, over as long
    return times, {"measured_util": round(iv.rate_mbps / RATE_MBPS, 4)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument(
        "--variant",
        action="append",
        choices=("linux", "quickack", "nocompsack", "paced"),
        help="emulated receivers as the kernel has them (linux), ACKing every segment (quickack), or"
        " without SACK compression (nocompsack); or senders pacing each flow (paced: --sender-pacing on)",
    )
    a = p.parse_args()
    variants = a.variant or ["linux"]
    a.out.mkdir(parents=True, exist_ok=True)
    for k in range(1, a.rounds + 1):
        for flows, hosts, b in POINTS:
            runs = [("emulated", v, emulated) for v in variants] + [("twin", "ns3", simulated)]
            for testbed, variant, fn in runs:
                if testbed == "twin" and k > 1:
                    continue  # the twin is deterministic: one round says it
                name = testbed if variant in ("linux", "ns3") else f"{testbed}-{variant}"
                path = a.out / f"{name}-n{flows}-b{b}-{k}.json"
                if not path.exists():
                    print(f"[arrivals] {name} N={flows} B={b} round {k}", file=sys.stderr, flush=True)
                    t0 = time.monotonic()
                    times, extra = fn(flows, hosts, b, variant)
                    with gzip.open(path.with_suffix(".times.gz"), "wt") as fh:
                        fh.write("\n".join(f"{t:.7f}" for t in times) + "\n")
                    row = {"testbed": name, "flows": flows, "hosts": hosts, "buffer_packets": b, "round": k}
                    row |= extra | burstiness(times, b) | {"wall_s": round(time.monotonic() - t0)}
                    path.write_text(json.dumps(row) + "\n")
    rows = [json.loads(q.read_text()) for q in sorted(a.out.glob("*-[0-9].json"))]  # every run so far
    keys = ["measured_util", "replay_busy", "replay_drops", "offered_load", "busy_at_load_1.1", "busy_at_load_1.2",
            "gaps_lt_15us", "gaps_lt_half_service", "idc_1ms", "idc_10ms", "idc_100ms"]  # fmt: skip
    lines = [
        "# Arrivals at the bottleneck: emulation and twin (Reno, 62.5 Mb/s, 87 ms)",
        "",
        f"Warm-up {WARM_S:g} s at 2 BDP, {SETTLE_S:g} s at the buffer, then {TRACE_S:g} s of arrivals traced. "
        "One row per run (the twin is deterministic: one run).",
        "",
        "| testbed | N | hosts | B | round | " + " | ".join(keys) + " |",
        "|---|---|---|---|---|" + "---|" * len(keys),
    ]
    for r in sorted(rows, key=lambda r: (r["flows"], r["testbed"], r["round"])):
        cells = " | ".join(str(r.get(k)) for k in keys)
        lines.append(
            f"| {r['testbed']} | {r['flows']} | {r['hosts']} | {r['buffer_packets']} | {r['round']} | {cells} |"
        )
    (a.out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
