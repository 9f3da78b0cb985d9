"""The smallest bottleneck buffer that keeps the link at the target utilization, on a real emulated link.

One experiment: build the dumbbell with a calibration buffer of two bandwidth-delay products, start
N long-lived flows, measure the reference rate (median of many samples; the link cannot do better
than this), then run MedianSearch (buffersizing/search.py) with probes that change the bfifo limit in
place, wait a settle time scaled to the congestion-control dynamics, and sample utilization from
the bottleneck's interface counters. Everything is recorded: every sample of every probe, drops
everywhere on the path, CPU, and the link's pacing fidelity.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from buffersizing import FRAME_BYTES
from buffersizing.config import DumbbellConfig, check_number
from buffersizing.dynamics import Timing, auto_timing
from buffersizing.errors import RunError, UsageError
from buffersizing.search import MedianSearch, Probe
from buffersizing.traffic import LongFlows, split_flows
from monitors import drops as drop_monitor
from monitors import fidelity
from monitors.counters import InterfaceCounters, rate_mbps
from monitors.cpu import MIN_IDLE, CpuMeter
from monitors.plots import plot_run, write_fidelity_csv
from monitors.recorder import Recorder, queue_stats, summary, write_csvs
from topologies import shaper
from topologies.dumbbell import BOTTLENECK_DEV, Dumbbell

CALIBRATION_BDPS = 2  # calibration buffer, in bandwidth-delay products
MIN_REFERENCE = 0.90  # of the nominal rate: below this the emulation cannot carry the configuration
GOOD_REFERENCE = 0.97  # below this the result is flagged
MAX_FIDELITY_GT10 = 0.10  # fraction of gaps >10 % off ideal above which pacing is flagged (2012: 6-8 %)
MIN_QUEUE_HZ = 90  # the queue monitor is meant to run at 100 Hz; below this it fell behind
RELATIVE_TO = ("reference", "nominal")


@dataclass
class SearchOptions:
    flows: int
    target: float = 0.99
    relative_to: str = "reference"
    samples: int = 5
    settle_s: float | None = None  # None: scaled to the dynamics at each probe's buffer
    sample_s: float | None = None
    max_sample_s: float = 30.0
    resolution: float = 0.05
    first_guess: bool = True
    tool: str = "iperf"
    fidelity_s: float = 2.0  # 0 skips the fidelity trace

    def validate(self) -> None:
        split_flows(self.flows, 1)
        check_number("--target", self.target, 0.5, 1.0)
        if self.relative_to not in RELATIVE_TO:
            raise UsageError(f"--relative-to {self.relative_to}: must be one of {', '.join(RELATIVE_TO)}")
        if not 1 <= self.samples <= 100:
            raise UsageError(f"--samples {self.samples}: must be from 1 to 100")
        for name, v in (("--settle-s", self.settle_s), ("--sample-s", self.sample_s)):
            if v is not None:
                check_number(name, v, 0, 600)
        check_number("--resolution", self.resolution, 0, 0.5, lo_inclusive=True)
        check_number("--fidelity-s", self.fidelity_s, 0, 60, lo_inclusive=True)

    def to_dict(self) -> dict:
        return asdict(self)


def theory(cfg: DumbbellConfig, flows: int) -> dict:
    bdp = cfg.bdp_bytes / FRAME_BYTES
    return {
        "bdp_packets": round(bdp, 1),
        "theory_sqrt_n_packets": round(bdp / math.sqrt(flows), 1),
        "rtt_ms_for_theory": max(cfg.rtt_ms),
    }


@dataclass
class Measurement:
    """One call of the search's measure(): settle (if the buffer changed), then samples."""

    buffer_packets: int
    t_start: float
    settle_s: float
    sample_s: float
    rates_mbps: list[float]
    utilization: list[float]
    bottleneck_drops: int
    packets_sent: int
    cpu: dict = field(default_factory=dict)
    queue: dict = field(default_factory=dict)  # backlog while sampling (monitors/recorder.py)

    @property
    def loss_rate(self) -> float:
        return self.bottleneck_drops / max(1, self.packets_sent + self.bottleneck_drops)


class LinkProber:
    """measure(buffer_bytes, n) for MedianSearch, on a running dumbbell with its flows."""

    def __init__(self, net: Dumbbell, flows: LongFlows, opts: SearchOptions, denominator_mbps: float) -> None:
        self.net, self.flows, self.opts = net, flows, opts
        self.denominator = denominator_mbps
        self.counters = InterfaceCounters(net.switch_ns, BOTTLENECK_DEV)
        self.measurements: list[Measurement] = []
        self.windows: list[tuple[float, float]] = []  # monotonic start, end of each measurement's samples

    def timing(self, buffer_bytes: float) -> Timing:
        cfg = self.net.cfg
        auto = auto_timing(
            cfg.cc, self.opts.flows, cfg.rate_mbps, max(cfg.rtt_ms), buffer_bytes, max_sample_s=self.opts.max_sample_s
        )
        return Timing(
            self.opts.settle_s if self.opts.settle_s is not None else auto.settle_s,
            self.opts.sample_s if self.opts.sample_s is not None else auto.sample_s,
            auto.warmup_s,
        )

    def rates(self, n: int, sample_s: float) -> list[float]:
        """n back-to-back samples of the bottleneck's transmit rate, in Mb/s."""
        out = []
        prev = self.counters.read()
        for _ in range(n):
            time.sleep(max(0.0, prev.t + sample_s - time.monotonic()))
            cur = self.counters.read()
            out.append(rate_mbps(prev, cur))
            prev = cur
        return out

    def measure(self, buffer_bytes: int, n: int) -> list[float]:
        timing = self.timing(buffer_bytes)
        settle = 0.0
        if buffer_bytes != self.net.buffer_bytes:
            self.net.set_buffer(buffer_bytes)
            settle = timing.settle_s
            time.sleep(settle)
        t0 = time.time()
        cpu = CpuMeter()
        drops0 = shaper.leaf_drops(self.net.switch_ns, BOTTLENECK_DEV)
        sent0 = self.counters.read().tx_packets
        t_mono = time.monotonic()
        rates = self.rates(n, timing.sample_s)
        self.windows.append((t_mono, time.monotonic()))
        sent = self.counters.read().tx_packets - sent0
        drops = shaper.leaf_drops(self.net.switch_ns, BOTTLENECK_DEV) - drops0
        share = cpu.share()
        self.net.check_alive()
        self.flows.check()
        m = Measurement(
            buffer_bytes // FRAME_BYTES,
            round(t0, 3),
            round(settle, 2),
            round(timing.sample_s, 2),
            [round(r, 4) for r in rates],
            [round(r / self.denominator, 5) for r in rates],
            drops,
            sent,
            share.to_dict(),
        )
        self.measurements.append(m)
        return m.utilization

    def close(self) -> None:
        self.counters.close()


def calibrate(prober: LinkProber, nominal_mbps: float, samples: int, log: Callable[[str], None]) -> list[float]:
    """Median of many samples at the calibration buffer; retried, then refused, if far below nominal."""
    rtt_s = max(prober.net.cfg.rtt_ms) / 1000
    sample_s = max(1.0, 10 * rtt_s)  # the queue never empties at 2 BDP: short samples are exact
    tried: list[float] = []
    for attempt in range(3):
        rates = prober.rates(samples, sample_s)
        ref = statistics.median(rates)
        tried.append(round(ref, 3))
        log(f"  reference rate {ref:.2f} Mb/s ({ref / nominal_mbps:.1%} of {nominal_mbps:g}) from {samples} samples")
        if ref >= MIN_REFERENCE * nominal_mbps:
            return rates
        if attempt < 2:
            time.sleep(prober.timing(prober.net.buffer_bytes).warmup_s)
    raise RunError(
        f"the link never carried {MIN_REFERENCE:.0%} of its {nominal_mbps:g} Mb/s with a {CALIBRATION_BDPS}-BDP buffer "
        f"(medians {', '.join(map(str, tried))} Mb/s): the machine cannot emulate this configuration faithfully; "
        "try a lower --rate-mbps, fewer flows, or check `bufsize doctor` and the CPU load"
    )


def write_samples_csv(path: Path, measurements: list[Measurement]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["measurement", "buffer_packets", "t_start", "settle_s", "sample", "sample_s", "rate_mbps", "util"])
        for i, m in enumerate(measurements):
            for j, (r, u) in enumerate(zip(m.rates_mbps, m.utilization, strict=True)):
                w.writerow([i, m.buffer_packets, m.t_start, m.settle_s, j, m.sample_s, r, u])


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


def run_search(
    cfg: DumbbellConfig,
    backend: str,
    opts: SearchOptions,
    out: Path | None = None,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Run one search end to end and return (and, with `out`, write) its result."""
    say = log or (lambda s: print(s, file=sys.stderr, flush=True))
    opts.validate()
    t_wall = time.monotonic()
    th = theory(cfg, opts.flows)
    cal_packets = math.ceil(CALIBRATION_BDPS * cfg.bdp_bytes / FRAME_BYTES)
    cfg = DumbbellConfig(**(cfg.to_dict() | {"buffer_bytes": cal_packets * FRAME_BYTES}))
    say(
        f"search: {opts.flows} flows over {cfg.hosts} hosts, {cfg.rate_mbps:g} Mb/s, RTT {max(cfg.rtt_ms):g} ms, "
        f"cc {cfg.cc}, target {opts.target:.1%} of the {opts.relative_to} rate; BDP {th['bdp_packets']:.0f} packets, "
        f"RTT*C/sqrt(N) {th['theory_sqrt_n_packets']:.1f}"
    )
    with Dumbbell(cfg, backend) as net:
        drops_start = drop_monitor.snapshot(net)
        with LongFlows(net, opts.flows, opts.tool) as flows:
            started = flows.start_info
            assert started is not None
            say(f"  {started.established} flows established in {started.seconds_to_all_established} s")
            prober = LinkProber(net, flows, opts, cfg.rate_mbps)
            recorder = start_recorder(net, flows, say)
            try:
                warm = prober.timing(net.buffer_bytes).warmup_s
                say(f"  warming up {warm:.0f} s at {cal_packets} packets")
                time.sleep(warm)
                cal_rates = calibrate(prober, cfg.rate_mbps, max(10, 2 * opts.samples), say)
                reference = statistics.median(cal_rates)
                fid, departures = (
                    fidelity.measure(BOTTLENECK_DEV, cfg.rate_mbps, opts.fidelity_s)
                    if opts.fidelity_s > 0
                    else ({"available": False, "reason": "skipped (--fidelity-s 0)"}, [])
                )
                prober.denominator = reference if opts.relative_to == "reference" else cfg.rate_mbps
                guess = max(1, round(th["theory_sqrt_n_packets"])) if opts.first_guess else None

                def progress(p: Probe) -> None:
                    verdict = "pass" if p.passed else "fail"
                    extra = " (re-check)" if p.recheck else ""
                    q = queue_stats(recorder.rec.queue, *prober.windows[-1]) if recorder else {}
                    backlog = f", queue mean {q['mean_packets']:.0f} max {q['max_packets']}" if q.get("samples") else ""
                    say(
                        f"  probe {len(search.probes):2d}: {p.buffer_packets:5d} packets -> median {p.median:.2%} "
                        f"{verdict}{extra}{backlog} [{len(p.samples)} samples, {time.monotonic() - t_wall:.0f} s]"
                    )

                search = MedianSearch(
                    prober.measure,
                    target=opts.target,
                    hi_packets=cal_packets,
                    samples=opts.samples,
                    first_guess_packets=guess,
                    assume_hi_passes=opts.relative_to == "reference",
                    resolution=opts.resolution,
                    progress=progress,
                )
                res = search.run()
                ccs = flows.congestion_controls()
            finally:
                prober.close()
                recording = recorder.stop() if recorder else None
        drops = drop_monitor.difference(net, drops_start, drop_monitor.snapshot(net))
    wall = time.monotonic() - t_wall

    answer = res.buffer_packets
    monitors = summary(recording) if recording else {"error": "queue monitor could not start"}
    if recording:
        for m, window in zip(prober.measurements, prober.windows, strict=True):
            m.queue = queue_stats(recording.queue, *window)
    queue_hz = monitors.get("queue", {}).get("rate_hz")
    idles = [m.cpu["idle"] for m in prober.measurements]
    cpu_idle_min = min(idles) if idles else None
    flags = {
        "converged": res.converged,
        "answer_below_search_top": answer < cal_packets,
        "reference_near_nominal": reference >= GOOD_REFERENCE * cfg.rate_mbps,
        "flows_held_until_all_up": started.held_until_all_up,
        "congestion_control_as_asked": set(ccs) == {cfg.cc},
        "no_drops_outside_bottleneck": drops.outside_total == 0,
        "cpu_idle_enough": cpu_idle_min is None or cpu_idle_min >= MIN_IDLE,
        "pacing_fidelity_ok": fid["frac_gt10"] <= MAX_FIDELITY_GT10 if fid.get("available") else None,
        "queue_monitor_kept_up": not monitors.get("error") and queue_hz is not None and queue_hz >= MIN_QUEUE_HZ,
    }
    result = {
        "flows": opts.flows,
        "hosts": cfg.hosts,
        "cc": cfg.cc,
        "buffer_packets": answer,
        "buffer_bytes": answer * FRAME_BYTES,
        "reference_rate_mbps": round(reference, 3),
        "nominal_rate_mbps": cfg.rate_mbps,
        "target": opts.target,
        "relative_to": opts.relative_to,
        **th,
        "ratio_to_theory": round(answer / th["theory_sqrt_n_packets"], 3),
        "calibration_buffer_packets": cal_packets,
        "wall_seconds": round(wall, 1),
        "valid": all(v is not False for v in flags.values()),
        "flags": flags,
        "note": res.note,
        "delay_backend": backend,
        "flows_start": asdict(started) | {"congestion_controls_seen": ccs},
        "calibration_rates_mbps": [round(r, 3) for r in cal_rates],
        "fidelity": fid,
        "monitors": monitors,
        "drops": drops.to_dict(),
        "cpu": {
            "min_idle_share": round(cpu_idle_min, 3) if cpu_idle_min is not None else None,
            "per_measurement": [m.cpu for m in prober.measurements],
        },
        "loss_rate_at_answer": next(
            (round(m.loss_rate, 6) for m in reversed(prober.measurements) if m.buffer_packets == answer), None
        ),
        "probes": [asdict(p) for p in res.probes],
        "measurements": [asdict(m) | {"loss_rate": round(m.loss_rate, 6)} for m in prober.measurements],
        "options": opts.to_dict(),
        "config": cfg.to_dict(),
    }
    say(
        f"  answer: {answer} packets ({answer * FRAME_BYTES} bytes), {result['ratio_to_theory']}x RTT*C/sqrt(N); "
        f"{'valid' if result['valid'] else 'FLAGGED: ' + ', '.join(k for k, v in flags.items() if v is False)}; "
        f"{wall:.0f} s"
    )
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        write_samples_csv(out / "samples.csv", prober.measurements)
        if recording:
            write_csvs(recording, out)
        if departures:
            write_fidelity_csv(departures, cfg.rate_mbps, out / "fidelity.csv")
        write_json_atomic(out / "result.json", result)
        try:
            plot_run(out)
        except Exception as e:  # plots are a convenience; the data and result are already written
            say(f"  plots not drawn: {type(e).__name__}: {e}")
    return result


def start_recorder(net: Dumbbell, flows: LongFlows, say: Callable[[str], None]) -> Recorder | None:
    """Queue (100 Hz), rate, cwnd and CPU recorder for this run; None (and a message) if it cannot start."""
    try:
        ports = range(min(flows.ports), max(flows.ports) + 1) if flows.ports else None
        return Recorder(
            net.switch_ns, BOTTLENECK_DEV, shaper.tc_handle(shaper.LEAF), shaper.tc_handle(shaper.CLASS), ports
        ).start()
    except (OSError, LookupError) as e:
        say(f"  queue monitor not started: {e}")
        return None
