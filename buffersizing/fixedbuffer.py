"""Fixed-buffer experiments: utilization, loss and queue at given buffers, after the flows have settled.

One dumbbell and one set of N flows serve every buffer asked for (the bfifo limit is changed in
place, as the search does), so the flows' RTT spread and start times are the same for each. Before
the first buffer, the flows warm up at two bandwidth-delay products and the link's reference rate
is measured there: the most this emulation carries, against which a utilization short of 100 % can
be judged. Utilization itself is against the nominal rate C, as the papers report it.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from buffersizing import FRAME_BYTES
from buffersizing.config import DumbbellConfig, check_number
from buffersizing.dynamics import auto_timing
from buffersizing.errors import RunError, UsageError
from buffersizing.minbuffer import GOOD_REFERENCE, MAX_FIDELITY_GT10, MIN_QUEUE_HZ, start_recorder, write_json_atomic
from buffersizing.traffic import LongFlows, split_flows
from monitors import drops as drop_monitor
from monitors import fidelity
from monitors.counters import InterfaceCounters, rate_mbps
from monitors.cpu import MIN_IDLE, CpuMeter
from monitors.plots import plot_run, write_fidelity_csv
from monitors.recorder import Recorder, queue_stats, summary, write_csvs
from topologies import shaper
from topologies.dumbbell import BOTTLENECK_DEV, Dumbbell

REFERENCE_BDPS = 2
# Many flows starting together overshoot in slow start and sit out timeouts with backoff; give them time.
MIN_WARMUP_S = 15.0
MIN_SETTLE_S = 5.0


@dataclass
class MeasureOptions:
    flows: int
    duration_s: float = 60.0  # measured time at each buffer
    settle_s: float | None = None  # after a buffer change; None: scaled to the dynamics (>= 20 RTT, 5 s)
    sample_s: float = 1.0  # utilization samples (their spread is reported)
    reference_s: float = 10.0  # 0: skip the reference-rate measurement
    fidelity_s: float = 2.0
    tool: str = "iperf"

    def validate(self) -> None:
        split_flows(self.flows, 1)
        check_number("--duration", self.duration_s, 0, 3600)
        if self.settle_s is not None:
            check_number("--settle-s", self.settle_s, 0, 600, lo_inclusive=True)
        check_number("--sample-s", self.sample_s, 0, 60)
        if self.sample_s > self.duration_s:
            raise UsageError(f"--sample-s {self.sample_s:g} is longer than --duration {self.duration_s:g}")
        check_number("--reference-s", self.reference_s, 0, 600, lo_inclusive=True)
        check_number("--fidelity-s", self.fidelity_s, 0, 60, lo_inclusive=True)


def _samples(counters: InterfaceCounters, n: int, sample_s: float) -> tuple[list[float], int, int, float]:
    """n back-to-back rate samples (Mb/s); the bytes and packets sent over all of them, and the seconds."""
    first = prev = counters.read()
    rates = []
    for _ in range(n):
        time.sleep(max(0.0, prev.t + sample_s - time.monotonic()))
        cur = counters.read()
        rates.append(rate_mbps(prev, cur))
        prev = cur
    return rates, prev.tx_bytes - first.tx_bytes, prev.tx_packets - first.tx_packets, prev.t - first.t


def measure_buffer(
    net: Dumbbell, flows: LongFlows, counters: InterfaceCounters, rec: Recorder, buffer_bytes: int, o: MeasureOptions
) -> dict:
    cfg = net.cfg
    rtt = max(cfg.rtt_ms)
    settle = o.settle_s
    if settle is None:
        auto = auto_timing(cfg.cc, o.flows, cfg.rate_mbps, rtt, buffer_bytes, max_sample_s=o.duration_s)
        settle = max(MIN_SETTLE_S, auto.settle_s)
    if buffer_bytes != net.buffer_bytes:
        net.set_buffer(buffer_bytes)
    time.sleep(settle)
    n = max(1, round(o.duration_s / o.sample_s))
    cpu = CpuMeter()
    leaf0 = shaper.leaf_drops(net.switch_ns, BOTTLENECK_DEV)
    t0 = time.monotonic()
    rates, sent_bytes, sent_packets, seconds = _samples(counters, n, o.sample_s)
    t1 = time.monotonic()
    dropped = shaper.leaf_drops(net.switch_ns, BOTTLENECK_DEV) - leaf0
    net.check_alive()
    flows.check()
    util = sent_bytes * 8 / seconds / 1e6 / cfg.rate_mbps
    sums = [s for t, _, s, _ in rec.rec.cwnd_sum if t0 <= t <= t1]
    return {
        "buffer_packets": round(buffer_bytes / FRAME_BYTES, 1),
        "buffer_bytes": buffer_bytes,
        "settle_s": round(settle, 1),
        "seconds": round(seconds, 2),
        "utilization": round(util, 5),
        "utilization_samples": {
            "n": len(rates),
            "median": round(statistics.median(rates) / cfg.rate_mbps, 5),
            "min": round(min(rates) / cfg.rate_mbps, 5),
            "max": round(max(rates) / cfg.rate_mbps, 5),
        },
        "bottleneck_drops": dropped,
        "packets_sent": sent_packets,
        "loss_rate": round(dropped / max(1, sent_packets + dropped), 6),
        "queue": queue_stats(rec.rec.queue, t0, t1),
        "cwnd_sum": (
            {"samples": len(sums), "mean": round(statistics.fmean(sums), 1), "sd": round(statistics.pstdev(sums), 1)}
            if len(sums) > 1
            else {"samples": len(sums)}
        ),
        "cpu": cpu.share().to_dict(),
        "rates_mbps": [round(r, 3) for r in rates],
    }


def run_measure(
    cfg: DumbbellConfig,
    backend: str,
    buffers_bytes: list[int],
    opts: MeasureOptions,
    out: Path | None = None,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Measure at each buffer in turn on one dumbbell; return (and, with `out`, write) the result."""
    say = log or (lambda s: print(s, file=sys.stderr, flush=True))
    opts.validate()
    if not buffers_bytes:
        raise UsageError("give at least one buffer")
    for b in buffers_bytes:
        if b < FRAME_BYTES:
            raise UsageError(f"buffer {b} bytes: must hold at least one {FRAME_BYTES}-byte frame")
    t_wall = time.monotonic()
    bdp = cfg.bdp_bytes / FRAME_BYTES  # at the longest RTT: what the warm-up buffer must cover
    # Packets in flight with flows sharing C equally over spread RTTs: C x the mean RTT.
    pipe = cfg.rate_mbps * 1e6 / 8 * statistics.fmean(cfg.rtt_ms) / 1000 / FRAME_BYTES
    warm_buffer = REFERENCE_BDPS * round(bdp) * FRAME_BYTES if opts.reference_s > 0 else buffers_bytes[0]
    cfg = DumbbellConfig(**(cfg.to_dict() | {"buffer_bytes": warm_buffer}))
    rtt = max(cfg.rtt_ms)
    say(
        f"measure: {opts.flows} flows over {cfg.hosts} hosts, {cfg.rate_mbps:g} Mb/s, "
        f"RTT {min(cfg.rtt_ms):g}..{rtt:g} ms, "
        f"cc {cfg.cc}; BDP {pipe:.0f} packets (mean RTT); "
        f"buffers {', '.join(f'{b / FRAME_BYTES:.0f}' for b in buffers_bytes)} "
        f"packets, {opts.duration_s:g} s each"
    )
    points = []
    reference = None
    with Dumbbell(cfg, backend) as net:
        drops_start = drop_monitor.snapshot(net)
        with LongFlows(net, opts.flows, opts.tool) as flows:
            started = flows.start_info
            assert started is not None
            say(f"  {started.established} flows established in {started.seconds_to_all_established} s")
            counters = InterfaceCounters(net.switch_ns, BOTTLENECK_DEV)
            rec = start_recorder(net, flows, say)
            if rec is None:  # utilization alone would do, but this command promises queue statistics
                counters.close()
                raise RunError("the queue monitor could not start (see the message above)")
            try:
                warm = max(MIN_WARMUP_S, auto_timing(cfg.cc, opts.flows, cfg.rate_mbps, rtt, warm_buffer).warmup_s)
                say(f"  warming up {warm:.0f} s at {warm_buffer // FRAME_BYTES} packets")
                time.sleep(warm)
                if opts.reference_s > 0:
                    _, ref_bytes, _, ref_s = _samples(counters, max(1, round(opts.reference_s)), 1.0)
                    reference = ref_bytes * 8 / ref_s / 1e6
                    say(
                        f"  reference rate at {REFERENCE_BDPS} BDP: {reference:.2f} Mb/s "
                        f"({reference / cfg.rate_mbps:.2%})"
                    )
                fid, departures = (
                    fidelity.measure(BOTTLENECK_DEV, cfg.rate_mbps, opts.fidelity_s)
                    if opts.fidelity_s > 0
                    else ({"available": False, "reason": "skipped (--fidelity-s 0)"}, [])
                )
                for b in buffers_bytes:
                    p = measure_buffer(net, flows, counters, rec, b, opts)
                    points.append(p)
                    q = p["queue"]
                    say(
                        f"  {p['buffer_packets']:g} packets: utilization {p['utilization']:.2%}, "
                        f"loss {p['loss_rate']:.3%}, "
                        f"queue mean {q.get('mean_packets', 0):.0f} (empty {q.get('empty_fraction', 0):.0%}) "
                        f"[{time.monotonic() - t_wall:.0f} s]"
                    )
                ccs = flows.congestion_controls()
            finally:
                counters.close()
                recording = rec.stop()
        drops = drop_monitor.difference(net, drops_start, drop_monitor.snapshot(net))
    monitors = summary(recording)
    idle = min(p["cpu"]["idle"] for p in points)
    queue_hz = monitors.get("queue", {}).get("rate_hz") or 0
    flags = {
        "flows_held_until_all_up": started.held_until_all_up,
        "congestion_control_as_asked": set(ccs) == {cfg.cc},
        "no_drops_outside_bottleneck": drops.outside_total == 0,
        "cpu_idle_enough": idle >= MIN_IDLE,
        "reference_near_nominal": reference >= GOOD_REFERENCE * cfg.rate_mbps if reference is not None else None,
        "pacing_fidelity_ok": fid["frac_gt10"] <= MAX_FIDELITY_GT10 if fid.get("available") else None,
        "queue_monitor_kept_up": not monitors.get("error") and queue_hz >= MIN_QUEUE_HZ,
    }
    result = {
        "kind": "measure",
        "flows": opts.flows,
        "hosts": cfg.hosts,
        "cc": cfg.cc,
        "nominal_rate_mbps": cfg.rate_mbps,
        "bdp_packets": round(pipe, 1),
        "bdp_packets_longest_rtt": round(bdp, 1),
        "reference_rate_mbps": round(reference, 3) if reference is not None else None,
        "points": points,
        "valid": all(v is not False for v in flags.values()),
        "flags": flags,
        "wall_seconds": round(time.monotonic() - t_wall, 1),
        "delay_backend": backend,
        "flows_start": asdict(started) | {"congestion_controls_seen": ccs},
        "fidelity": fid,
        "drops": drops.to_dict(),
        "monitors": monitors,
        "options": asdict(opts),
        "config": cfg.to_dict(),
    }
    if len(points) == 1:  # the single-buffer form reads like one measurement
        result |= {k: points[0][k] for k in ("buffer_packets", "buffer_bytes", "utilization", "loss_rate", "queue")}
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        write_csvs(recording, out)
        if departures:
            write_fidelity_csv(departures, cfg.rate_mbps, out / "fidelity.csv")
        write_json_atomic(out / "result.json", result)
        try:
            plot_run(out)
        except Exception as e:  # plots are a convenience; data and result are written
            say(f"  plots not drawn: {type(e).__name__}: {e}")
    return result
