"""Fixed-buffer experiments: utilization, loss and queue at given buffers, after the flows have settled.

One dumbbell and one set of N flows serve every buffer asked for (the bfifo limit is changed in
place, as the search does), so the flows' RTT spread and start times are the same for each. Before
the first buffer, the flows warm up at two bandwidth-delay products and the link's reference rate
is measured there: the most this emulation carries, against which a utilization short of 100 % can
be judged. Utilization itself is against the nominal rate C, as the papers report it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from bufsize.longlived.dynamics import auto_timing
from bufsize.monitors.tcpstats import recovery_shares
from bufsize.scaffold.cautions import describe as describe_cautions
from bufsize.scaffold.experiment import MAX_WAIT_S, MIN_SAMPLE_S, Say, check_fidelity_s
from bufsize.scaffold.link import LinkSpec, SampledLink
from bufsize.scaffold.runs import OnLink
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.errors import UsageError
from bufsize.topologies.units import check_number
from bufsize.traffic.longflows import split_flows

REFERENCE_BDPS = 2
MAX_DURATION_S = 3600.0
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
    # Before the reference (or the first buffer). None: one congestion cycle, at least MIN_WARMUP_S.
    # Given: exactly that, and the result says so (a few flows on a short path are up in 2-3 s).
    warmup_s: float | None = None

    def validate(self, cfg: LinkSpec) -> None:
        split_flows(self.flows, 1)
        check_number("--duration", self.duration_s, 0, MAX_DURATION_S)
        if self.warmup_s is not None:
            check_number("--warmup-s", self.warmup_s, 0, MAX_WAIT_S, lo_inclusive=True)
        if self.settle_s is not None:
            check_number("--settle-s", self.settle_s, 0, MAX_WAIT_S, lo_inclusive=True)
        check_number("--sample-s", self.sample_s, MIN_SAMPLE_S, 60, lo_inclusive=True)
        if self.sample_s > self.duration_s:
            raise UsageError(f"--sample-s {self.sample_s:g} is longer than --duration {self.duration_s:g}")
        # The reference is sampled in whole seconds (max(1, round(reference_s)) samples of 1 s).
        if self.reference_s != 0 and not (math.isfinite(self.reference_s) and 1 <= self.reference_s <= MAX_WAIT_S):
            raise UsageError(f"--reference-s {self.reference_s:g}: must be 0 (skip) or from 1 to {MAX_WAIT_S:g} s")
        check_fidelity_s(self.fidelity_s)
        if self.reference_s > 0 and round(cfg.bdp_bytes / FRAME_BYTES) < 1:
            # The flows warm up and the reference is taken at REFERENCE_BDPS x round(BDP) packets.
            raise UsageError(
                f"--rtt-ms {max(cfg.rtt_ms):g} with --rate-mbps {cfg.rate_mbps:g}: the bandwidth-delay product is "
                f"{cfg.bdp_bytes / FRAME_BYTES:.2g} packets, so the reference buffer of {REFERENCE_BDPS} BDP "
                "would be empty; give a longer --rtt-ms or skip the reference with --reference-s 0"
            )


def measure_buffer(
    link: SampledLink,
    flows: int,
    buffer_bytes: int,
    o: MeasureOptions,
    cwnd_sums: Callable[[float, float], list[float]] | None = None,
) -> dict:
    """One buffer on a link whose flows run (emulated or simulated): set it, settle, then `duration`
    of back-to-back samples. `cwnd_sums`: the senders' summed windows traced between two monotonic
    times (the emulation's recorder; the twin has none)."""
    cfg = link.cfg
    settle = o.settle_s
    if settle is None:
        auto = auto_timing(cfg.cc, flows, cfg.rate_mbps, max(cfg.rtt_ms), buffer_bytes, max_sample_s=o.duration_s)
        settle = max(MIN_SETTLE_S, auto.settle_s)
    if buffer_bytes != link.buffer_bytes:
        link.set_buffer_bytes(buffer_bytes)
    link.wait(settle)
    taken = link.take(max(1, round(o.duration_s / o.sample_s)), o.sample_s)
    rates, dropped, sent = taken.rates_mbps, taken.drops, taken.packets_sent
    sums = cwnd_sums(*taken.window) if cwnd_sums is not None and taken.window is not None else []
    return {
        "buffer_packets": round(buffer_bytes / FRAME_BYTES, 1),
        "buffer_bytes": buffer_bytes,
        "settle_s": round(settle, 1),
        "seconds": round(taken.seconds, 2),
        "utilization": round(taken.mean_mbps / cfg.rate_mbps, 5),
        "utilization_samples": {
            "n": len(rates),
            "median": round(statistics.median(rates) / cfg.rate_mbps, 5),
            "min": round(min(rates) / cfg.rate_mbps, 5),
            "max": round(max(rates) / cfg.rate_mbps, 5),
        },
        "bottleneck_drops": dropped,
        "packets_sent": sent,
        "loss_rate": round(dropped / max(1, sent + dropped), 6),
        "tcp": taken.tcp | recovery_shares(taken.tcp),  # the senders' counters while sampling (monitors/tcpstats.py)
        "queue": taken.queue,
        "cwnd_sum": (
            {"samples": len(sums), "mean": round(statistics.fmean(sums), 1), "sd": round(statistics.pstdev(sums), 1)}
            if len(sums) > 1
            else {"samples": len(sums)}
        ),
        "cpu": taken.cpu or None,  # the emulation's CPU shares while sampling
        # The delay line's timekeeping while sampling (delay.timing_between; None under netem and on the twin).
        "delay_line": taken.delay_line or None,
        "rates_mbps": [round(r, 3) for r in rates],
    }


def warm_and_reference(
    link: SampledLink, flows: int, warm_buffer: int, o: MeasureOptions, warm: Callable[[float], None], say: Say
) -> float | None:
    """The flows warm up at `warm_buffer` (`warm` waits and says so; one congestion cycle, at least
    MIN_WARMUP_S, unless --warmup-s), then the link's reference rate at it over --reference-s (None
    when skipped)."""
    cfg = link.cfg
    seconds = o.warmup_s
    if seconds is None:
        seconds = max(MIN_WARMUP_S, auto_timing(cfg.cc, flows, cfg.rate_mbps, max(cfg.rtt_ms), warm_buffer).warmup_s)
    warm(seconds)
    if o.reference_s <= 0:
        return None
    reference = link.take(max(1, round(o.reference_s)), 1.0).mean_mbps
    say(f"  reference rate at {REFERENCE_BDPS} BDP: {reference:.2f} Mb/s ({reference / cfg.rate_mbps:.2%})")
    return reference


def point_line(p: dict, clock: str) -> str:
    """A measured buffer's progress line."""
    q = p["queue"]
    return (
        f"  {p['buffer_packets']:g} packets: utilization {p['utilization']:.2%}, loss {p['loss_rate']:.3%}, "
        f"queue mean {q.get('mean_packets', 0):.0f}"
        + (f" (empty {q['empty_fraction']:.0%})" if "empty_fraction" in q else "")
        + f" [{clock}]"
    )


def warm_buffer_bytes(cfg: LinkSpec, buffers_bytes: list[int], o: MeasureOptions) -> int:
    """Where the flows warm up: the reference's 2 BDP, or the first buffer when there is no reference."""
    bdp = cfg.bdp_bytes / FRAME_BYTES  # at the longest RTT: what the warm-up buffer must cover
    return REFERENCE_BDPS * round(bdp) * FRAME_BYTES if o.reference_s > 0 else buffers_bytes[0]


def pipe_packets(cfg: LinkSpec) -> float:
    """Packets in flight with flows sharing C equally over spread RTTs: C x the mean RTT."""
    return cfg.rate_mbps * 1e6 / 8 * statistics.fmean(cfg.rtt_ms) / 1000 / FRAME_BYTES


def point_fields(cfg: LinkSpec, points: list[dict]) -> dict:
    """The result's own fields: the pipe, every point, and the single point's keys at the top."""
    fields: dict = {
        "bdp_packets": round(pipe_packets(cfg), 1),
        "bdp_packets_longest_rtt": round(cfg.bdp_bytes / FRAME_BYTES, 1),
        "points": points,
    }
    if len(points) == 1:  # the single-buffer form reads like one measurement
        keys = ("buffer_packets", "buffer_bytes", "utilization", "loss_rate", "tcp", "queue")
        fields |= {k: points[0][k] for k in keys}
    return fields


def check_measure(cfg: LinkSpec, on: OnLink, buffers_bytes: list[int], opts: MeasureOptions,
                  name: str = "buffer") -> None:  # fmt: skip
    """What run_measure refuses, for a command to check before --print-config; `name`: the option
    that gave the buffers."""
    opts.validate(cfg)
    on.validate(cfg, opts.flows)
    if not buffers_bytes:
        raise UsageError("give at least one buffer")
    for b in buffers_bytes:
        on.check_buffer(b, name)


def run_measure(cfg: LinkSpec, on: OnLink, buffers_bytes: list[int], opts: MeasureOptions) -> dict:
    """Measure at each buffer in turn on one link (emulated or the twin, as `on` names it); return
    (and, with its `out`, write) the result."""
    check_measure(cfg, on, buffers_bytes, opts)
    warm_buffer = warm_buffer_bytes(cfg, buffers_bytes, opts)
    run = on.run(cfg, "measure", warm_buffer, min(buffers_bytes) // FRAME_BYTES, require_recorder=True)
    cfg, say = run.cfg, run.say
    say(
        f"{run.label}: {opts.flows} flows over {cfg.hosts} hosts, {cfg.rate_mbps:g} Mb/s, "
        f"RTT {min(cfg.rtt_ms):g}..{max(cfg.rtt_ms):g} ms, "
        f"cc {cfg.cc}; BDP {pipe_packets(cfg):.0f} packets (mean RTT); "
        f"buffers {', '.join(f'{b / FRAME_BYTES:.0f}' for b in buffers_bytes)} "
        f"packets, {opts.duration_s:g} s each" + run.describe()
    )
    points: list[dict] = []
    reference = None
    with run:
        link = run.open_link(opts.flows, opts.tool)
        run.partial = lambda: {"reference_rate_mbps": reference, "points": points}
        try:
            given = " (--warmup-s)" if opts.warmup_s is not None else ""
            warm = lambda s: run.warm_up(lambda _: s, f"at {warm_buffer // FRAME_BYTES} packets{given}")  # noqa: E731
            reference = warm_and_reference(link, opts.flows, warm_buffer, opts, warm, say)
            run.trace_fidelity(opts.fidelity_s)
            for b in buffers_bytes:
                points.append(measure_buffer(link, opts.flows, b, opts, run.cwnd_sums))
                say(point_line(points[-1], link.clock_text()))
        finally:
            link.close()
    idles = [p["cpu"]["idle"] for p in points if p["cpu"]]
    return run.finish(
        point_fields(cfg, points),
        {},
        reference_mbps=reference,
        cpu_idle_min=min(idles) if idles else None,
        options=asdict(opts),
    )


def format_measure(result: dict, out: Path | None) -> str:
    q = result["queue"]
    flagged = ", ".join(k for k, v in result["flags"].items() if v is False)
    text = (
        f"utilization {result['utilization']:.2%} of {result['nominal_rate_mbps']:g} Mb/s, "
        f"loss {result['loss_rate']:.3%}, queue mean {q.get('mean_packets')}"
        + (f" p99 {q['p99_packets']}" if "p99_packets" in q else "")  # the twin reports mean and max
        + f" max {q.get('max_packets')} packets"
        + ("" if result["valid"] else f"; FLAGGED: {flagged}")
    )
    if result.get("cautions"):  # older results have no cautions
        text += f"\n{describe_cautions(result['cautions'])}"
    written = "result written" if result.get("kind") == "sim-measure" else "result, monitor data and plots written"
    return text + (f"\n{written} to {out}/" if out is not None else "")
