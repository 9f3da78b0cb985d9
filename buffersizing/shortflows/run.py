"""Short-lived flows at a fixed buffer, alone or mixed with N long-lived flows: `bufsize shortflows`.

    build the dumbbell at the buffer -> (N long flows, warmed up) -> the short-flow generator
    -> its own warm-up -> the measured window (until the workload's duration, or until its
    last transfer ends) -> every transfer's record, the queue, loss, utilization, flows in CA.

Statistics cover the transfers that started inside the measured window; transfers.csv holds every
one (column `in_window`). The model beside a short-flow-only run is Appenzeller 2004's M/G/1 burst queue
(F9-F11) computed from the lengths actually sent and the initial window the kernel actually used.
"""

from __future__ import annotations

import csv
import math
import statistics
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from bufsize.longlived.dynamics import auto_timing
from bufsize.longlived.measure import MIN_WARMUP_S
from bufsize.monitors.recorder import idle_per_second, queue_stats
from bufsize.scaffold.cautions import describe as describe_cautions
from bufsize.scaffold.experiment import Experiment, Say, check_fidelity_s, line_lost
from bufsize.shortflows.plots import plot_shortflows
from bufsize.shortflows.stats import (
    fct_by_size,
    initial_windows,
    offered_load,
    percentile,
    queue_ccdf,
    size_packets,
    started_between,
    tail_slope,
    throughput_distribution,
    transfer_counts,
)
from bufsize.theory import model
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.config import DumbbellConfig
from bufsize.topologies.counters import InterfaceCounters
from bufsize.topologies.errors import UsageError
from bufsize.topologies.safefiles import atomic_text
from bufsize.topologies.units import check_buffer_bytes, check_number, packets_to_bytes
from bufsize.traffic.generator import COLUMNS
from bufsize.traffic.longflows import MAX_FLOWS
from bufsize.traffic.shortflows import ShortFlowRecords, ShortFlows
from bufsize.traffic.workload import MSS_BYTES, Workload

MAX_LINE_LOST = 0.001  # of the measured window; quiet runs lose nothing (bench/results/line-quick-n10*)
MAX_LATE_P99_S = 0.02  # open-loop arrivals later than this (p99) mean the generator fell behind
SHORT_WARMUP_S = 2.0
# One segment is under the kernel's smallest clamp (SOCK_MIN_RCVBUF / 2, about 1.9 KB); a cap of 1000
# packets (1.4 MB, with a receive buffer of 8 times that per connection) is past any short flow's reach here.
MIN_WINDOW_PACKETS, MAX_WINDOW_PACKETS = 2, 1000
WAIT_LIMIT_S = 6 * 3600.0


@dataclass
class ShortFlowOptions:
    workload: Workload = field(default_factory=Workload)
    long_flows: int = 0
    warmup_s: float = SHORT_WARMUP_S  # of the short flows, before the measured window
    initcwnd: int | None = None  # None: the kernel's (10)
    # The short transfers' window cap in full segments (ns-2's `window_`, 20 unless told otherwise);
    # None: only the kernel's buffers limit it. The long flows are not capped.
    max_window: int | None = None
    tool: str = "iperf"
    fidelity_s: float = 0.0
    grace_s: float = 5.0
    long_warmup_s: float | None = None  # of the long flows before the short ones; None: as measure does
    # A buffer ladder (Appenzeller 2004 Fig 12): after a first window of ladder_window_s at the run's buffer,
    # the buffer is changed in place to each of these in turn, settled, and measured as long.
    ladder_packets: list[int] = field(default_factory=list)
    ladder_window_s: float = 30.0
    ladder_settle_s: float = 3.0

    def ladder_seconds(self) -> float:
        """How long the short flows must run for the first window and the ladder after the warm-up."""
        n = len(self.ladder_packets)
        return self.ladder_window_s * (1 + n) + self.ladder_settle_s * n

    def validate(self) -> None:
        self.workload.validate()
        if not 0 <= self.long_flows <= MAX_FLOWS:
            raise UsageError(f"--flows {self.long_flows}: long-lived flows must be from 0 to {MAX_FLOWS}")
        check_number("--warmup-s", self.warmup_s, 0, 600, lo_inclusive=True)
        d = self.workload.duration_s
        if d is not None and self.warmup_s >= d:
            raise UsageError(f"--warmup-s {self.warmup_s:g} leaves nothing of --duration {d:g} to measure")
        if self.initcwnd is not None and not 1 <= self.initcwnd <= 1000:
            raise UsageError(f"--initcwnd {self.initcwnd}: must be from 1 to 1000 packets")
        if self.max_window is not None and not MIN_WINDOW_PACKETS <= self.max_window <= MAX_WINDOW_PACKETS:
            raise UsageError(
                f"--max-window {self.max_window}: must be from {MIN_WINDOW_PACKETS} to {MAX_WINDOW_PACKETS} packets"
            )
        check_fidelity_s(self.fidelity_s)
        check_number("grace", self.grace_s, 0, 600, lo_inclusive=True)
        if self.long_warmup_s is not None:
            check_number("--long-warmup-s", self.long_warmup_s, 0, 3600, lo_inclusive=True)
        check_number("--ladder-window-s", self.ladder_window_s, 1, 3600, lo_inclusive=True)
        check_number("ladder settle", self.ladder_settle_s, 0, 600, lo_inclusive=True)
        if self.ladder_packets:
            for b in self.ladder_packets:
                check_buffer_bytes(packets_to_bytes(b), "--ladder")
            need = self.warmup_s + self.ladder_seconds()
            if d is None or d < need:
                raise UsageError(f"a buffer ladder needs the short flows to run {need:g} s (--duration)")

    def to_dict(self) -> dict:
        return asdict(self)

    def max_window_bytes(self) -> int:
        return self.max_window * MSS_BYTES if self.max_window is not None else 0


def model_beside(rows: list[dict], load: float, iw: int, max_window: int | None = None) -> dict:
    """F9-F11 for the transfers sent: bursts of each length in slow start from the initial window,
    none larger than the window cap if there is one."""
    if not rows or not 0 < load < 1:
        return {"available": False, "reason": f"needs short flows only at a load below 1 (measured {load:.3f})"}
    mix = Counter(size_packets(r["size_bytes"]) for r in rows)
    m = model.flow_mix_moments(list(mix.items()), iw=iw, max_window_packets=max_window)
    return {
        "available": True,
        "initial_window": iw,
        "max_window": max_window,
        "load": round(load, 4),
        "burst_moments": {"e1": round(m.e1, 4), "e2": round(m.e2, 4), "e3": round(m.e3, 4)},
        "mean_queue_packets_f10": round(model.mean_queue_packets(load, m), 3),
        "kappa_f11": round(model.kappa_second_order(load, m), 6),
        "buffer_for_1pct_overflow_f11": round(model.buffer_for_overflow_probability(0.01, load, m), 1),
    }


def write_transfers(records: ShortFlowRecords, window: tuple[float, float], path: Path) -> None:
    """transfers.csv: the generator's rows, times from the generator's start, and `in_window`."""
    t0 = records.summary["t0"]
    with atomic_text(path) as f:
        w = csv.writer(f)
        w.writerow([*COLUMNS, "in_window"])
        for r in records.rows:
            out = []
            for c in COLUMNS:
                v = r[c]
                if c.startswith("t_") and isinstance(v, float) and not math.isnan(v):
                    v = round(v - t0, 6)
                elif isinstance(v, float):
                    v = round(v, 6) if not math.isnan(v) else ""
                out.append(v)
            w.writerow([*out, int(window[0] <= r["t_start"] < window[1])])


def run_shortflows(
    cfg: DumbbellConfig,
    backend: str,
    buffer_bytes: int,
    opts: ShortFlowOptions,
    out: Path | None = None,
    log: Say | None = None,
) -> dict:
    """One short-flow experiment at one buffer: long flows (if any), the short flows' warm-up and
    window, the ladder (if any), then the result. One function because every step runs inside one
    `with ex:` block on the same live dumbbell, generator and counters; its parts are the helpers below."""
    opts.validate()
    check_buffer_bytes(buffer_bytes)
    w = opts.workload
    cfg = replace(cfg, buffer_bytes=buffer_bytes)
    ex = Experiment(cfg, backend, "shortflows", out, log, require_recorder=True, saves_result=True)
    say = ex.say
    rtt = max(cfg.rtt_ms)  # warm-up is timed by the slowest flow
    loops = [f"at load {w.load:g} (open loop)"] * (w.load > 0) + [f"{w.users} users (closed loop)"] * (w.users > 0)
    rtts = f"{min(cfg.rtt_ms):g}..{rtt:g}" if min(cfg.rtt_ms) < rtt else f"{rtt:g}"
    say(
        f"shortflows: {w.sizes} {' and '.join(loops)}, "
        f"{opts.long_flows} long flows, {cfg.hosts} hosts, {cfg.rate_mbps:g} Mb/s, RTT {rtts} ms, "
        f"buffer {buffer_bytes / FRAME_BYTES:.0f} packets, cc {cfg.cc}"
    )
    records: ShortFlowRecords | None = None
    window = (math.nan, math.nan)
    before: dict = {}
    after: dict = {}
    steps: list[tuple] = []  # the ladder: (packets, counters and drops at its window's start and end)
    with ex:
        net = ex.net
        assert net is not None
        if opts.initcwnd is not None:
            net.set_initcwnd(opts.initcwnd)
        if opts.long_flows:
            start_long_flows(ex, cfg, opts, rtt, buffer_bytes)
        port = net.state.ports().stop - 1
        if not opts.long_flows:  # the cwnd trace follows the short flows (how many are in CA)
            ex.start_recorder(range(port, port + 1))
        sf = ShortFlows(net, w, port, opts.grace_s, opts.max_window_bytes())
        ex.checks.append(sf.check_process)
        t0 = sf.start()
        capped = f", windows capped at {opts.max_window} packets" if opts.max_window is not None else ""
        say(f"  short flows started: {sf.arrival_rate_per_s:.1f} arrivals/s open loop, {w.users} users{capped}")
        with net.bottleneck.counters() as counters:
            ex.sleep(opts.warmup_s)
            before = snapshot(ex, counters)
            ex.trace_fidelity(opts.fidelity_s)
            t_end = t0 + w.duration_s if w.duration_s is not None else t0 + WAIT_LIMIT_S
            if opts.ladder_packets:
                t_end = t0 + opts.warmup_s + opts.ladder_window_s
            last_note = time.monotonic()
            while time.monotonic() < t_end and not sf.finished():
                ex.sleep(min(0.5, max(0.0, t_end - time.monotonic())))
                if time.monotonic() - last_note >= 30:
                    last_note = time.monotonic()
                    say(f"  {time.monotonic() - t0:.0f} s of short flows")
            after = snapshot(ex, counters)
            steps = run_ladder(ex, counters, opts)
        # Transfers count from the planned start of the window (with no warm-up, from the first one);
        # rates and drops from the counters' own read times.
        window = (t0 + opts.warmup_s, after["c"].t)
        records = sf.stop()
        say(f"  {records.summary['counts']['done']} of {records.summary['counts']['started']} transfers done")
    assert records is not None and ex.recording is not None
    fields = summarize(cfg, opts, records, window, before, after, ex.recording)
    if steps:
        fields["ladder"] = [
            window_fields(cfg, records.rows, ex.recording, b, c0, d0, c1, d1) for b, c0, d0, c1, d1 in steps
        ]
    result = ex.finish(
        fields,
        {
            "generator_on_schedule": lateness(records.rows)["p99_s"] <= MAX_LATE_P99_S,
            "line_kept_time": line_kept_time(fields["line"], fields["window_seconds"]),
        },
        reference_mbps=None,
        cpu_idle_min=cpu_idle_min(ex.recording.cpu, window),
        options=opts.to_dict(),
        write_extra=lambda d: write_transfers(records, window, d / "transfers.csv"),
    )
    if out is not None:
        try:
            plot_shortflows(out)
        except Exception as e:  # noqa: BLE001 - plots are a convenience; the data are written
            say(f"  short-flow plots not drawn: {type(e).__name__}: {e}")
    return result


def start_long_flows(
    ex: Experiment, cfg: DumbbellConfig, opts: ShortFlowOptions, rtt: float, buffer_bytes: int
) -> None:
    """The long flows beside the short ones, warmed up for one congestion cycle unless told."""
    assert opts.long_flows
    ex.start_flows(opts.long_flows, opts.tool)
    warm = opts.long_warmup_s
    if warm is None:
        warm = max(MIN_WARMUP_S, auto_timing(cfg.cc, opts.long_flows, cfg.rate_mbps, rtt, buffer_bytes).warmup_s)
    ex.warm_up(lambda _: warm, "(long flows)")


def snapshot(ex: Experiment, counters: InterfaceCounters) -> dict:
    """The bottleneck's counters and drops, the line's stats and the long flows' acked bytes, now."""
    net = ex.net
    assert net is not None
    taken = {"c": counters.read(), "drops": net.bottleneck.leaf_drops()}
    taken["line"] = net.delayline.stats() if net.delayline else {}
    if ex.flows is not None:
        taken["acked"] = ex.flows.bytes_acked()
    return taken


def run_ladder(ex: Experiment, counters: InterfaceCounters, opts: ShortFlowOptions) -> list[tuple]:
    """Each ladder step: the buffer set in place, a settle, then a measured window (Fig 12)."""
    net = ex.net
    assert net is not None
    steps = []
    for b in opts.ladder_packets:
        net.set_buffer(packets_to_bytes(b))
        ex.sleep(opts.ladder_settle_s)
        c0, d0 = counters.read(), net.bottleneck.leaf_drops()
        ex.sleep(opts.ladder_window_s)
        steps.append((b, c0, d0, counters.read(), net.bottleneck.leaf_drops()))
        ex.say(f"  ladder: {b} packets measured")
    return steps


def line_kept_time(lost: dict | None, seconds: float) -> bool | None:
    """The line shaper lost at most MAX_LINE_LOST of the window to late wake-ups (None: no line).
    A stall of the delay line holds every packet and then releases them as one burst, which a
    short-flow queue (and its tail) shows as an episode of its own."""
    if lost is None:
        return None
    return lost["lost_ms"] / 1000 <= MAX_LINE_LOST * seconds


def lateness(rows: list[dict]) -> dict:
    """How late open-loop transfers started against their Poisson schedule (the generator's lag)."""
    late = [r["t_start"] - r["t_planned"] for r in rows if r["kind"] == "open"]
    if not late:
        return {"transfers": 0, "p99_s": 0.0}
    return {"transfers": len(late), "p50_s": round(percentile(late, 0.5), 5), "p99_s": round(percentile(late, 0.99), 5),
            "max_s": round(max(late), 5)}  # fmt: skip


def cpu_idle_min(cpu: list, window: tuple[float, float]) -> float | None:
    return min(idle_per_second(cpu, *window), default=None)


def summarize(
    cfg: DumbbellConfig,
    opts: ShortFlowOptions,
    records: ShortFlowRecords,
    window: tuple[float, float],
    before: dict,
    after: dict,
    recording,
) -> dict:
    a, b = before["c"], after["c"]
    seconds = b.t - a.t
    sent = b.tx_packets - a.tx_packets
    dropped = after["drops"] - before["drops"]
    rows = records.rows
    in_window = started_between(rows, *window)
    load = offered_load(in_window, seconds, cfg.rate_mbps)
    # In full-size frames (backlog bytes / 1514): SYNs, FINs and handshake ACKs queue too, and counted
    # as packets they would swell a short-flow queue whose service time they barely take.
    backlogs = [round(s.backlog / FRAME_BYTES) for s in recording.queue if window[0] <= s.t <= window[1]]
    ccdf = queue_ccdf(backlogs)
    iws = initial_windows(rows)
    iw = max(iws, key=lambda k: iws[k]) if iws else (opts.initcwnd or 10)
    fields: dict = {
        "buffer_packets": round(cfg.buffer_bytes / FRAME_BYTES, 1),
        "buffer_bytes": cfg.buffer_bytes,
        "workload": opts.workload.to_dict() | {"size_distribution": records.summary["size_distribution"]},
        "long_flows": opts.long_flows,
        "window_seconds": round(seconds, 3),
        "utilization": round((b.tx_bytes - a.tx_bytes) * 8 / seconds / 1e6 / cfg.rate_mbps, 5),
        "loss_rate": round(dropped / max(1, sent + dropped), 6),
        "bottleneck_drops": dropped,
        "packets_sent": sent,
        "queue": queue_stats(recording.queue, *window),
        "queue_ccdf": ccdf,
        "queue_tail_kappa": tail_slope(ccdf),
        # Time the line shaper lost over the window (the stats are written every 200 ms).
        "line": line_lost(before.get("line", {}), after.get("line", {})),
        "transfers": {
            "all": transfer_counts(rows),
            "in_window": transfer_counts(in_window),
            "generator": records.summary,
            "offered_load_in_window": round(load, 4),
            "initial_windows": iws,
            "open_loop_lateness": lateness(rows),
        },
        "fct_by_size": fct_by_size(in_window),
    }
    if opts.long_flows == 0:
        fields["model"] = model_beside(in_window, load, iw, opts.max_window)
    else:
        fields["model"] = {"available": False, "reason": "the burst model (F10, F11) is for short flows only"}
        acked0, acked1 = before.get("acked", {}), after.get("acked", {})
        mbps = [(acked1[f] - acked0[f]) * 8 / seconds / 1e6 for f in acked1 if f in acked0]
        fields["long_flow_throughput"] = throughput_distribution(mbps, cfg.rate_mbps / opts.long_flows)
    fields["flows_in_congestion_avoidance"] = ca_summary(recording.ca_counts, window)
    return fields


def window_fields(cfg: DumbbellConfig, rows: list[dict], recording, packets: int, c0, d0: int, c1, d1: int) -> dict:
    """One step of a buffer ladder: the link, the queue and the transfers that started in its window
    (a transfer still running at the window's end finishes under the next buffer, a few RTTs later)."""
    sent = c1.tx_packets - c0.tx_packets
    seconds = c1.t - c0.t
    inside = started_between(rows, c0.t, c1.t)
    return {
        "buffer_packets": packets,
        "window_seconds": round(seconds, 3),
        "utilization": round((c1.tx_bytes - c0.tx_bytes) * 8 / seconds / 1e6 / cfg.rate_mbps, 5),
        "loss_rate": round((d1 - d0) / max(1, sent + d1 - d0), 6),
        "queue": queue_stats(recording.queue, c0.t, c1.t),
        "transfers": transfer_counts(inside),
        "offered_load": round(offered_load(inside, seconds, cfg.rate_mbps), 4),
        "fct_by_size": fct_by_size(inside),
    }


def ca_summary(counts: list[tuple[float, int, int]], window: tuple[float, float]) -> dict:
    """Flows active each second and those in congestion avoidance (Appenzeller 2004's n, footnote 9): the
    long flows if there are any, else the short ones."""
    ca = [(t, active, n) for t, active, n in counts if window[0] <= t <= window[1]]
    if not ca:
        return {"snapshots": 0}
    return {
        "snapshots": len(ca),
        "active_mean": round(statistics.fmean(a for _, a, _ in ca), 2),
        "mean": round(statistics.fmean(n for _, _, n in ca), 2),
        "min": min(n for _, _, n in ca),
        "max": max(n for _, _, n in ca),
    }


def format_shortflows(result: dict, out: Path | None) -> str:
    tr = result["transfers"]["in_window"]
    q = result["queue"]
    lines = [
        f"utilization {result['utilization']:.2%}, loss {result['loss_rate']:.3%}, queue mean "
        f"{q.get('mean_packets')} p99 {q.get('p99_packets')} max {q.get('max_packets')} packets; "
        f"{tr['done']} of {tr['started']} transfers in the window done ({tr['failed']} failed)",
    ]
    for b in result["fct_by_size"][:12]:
        lines.append(
            f"  {b['packets']:>9} packets: {b['transfers']:6d} transfers, completion mean {b['mean_s'] * 1e3:.1f} ms, "
            f"median {b['median_s'] * 1e3:.1f}, p95 {b['p95_s'] * 1e3:.1f}"
        )
    m = result.get("model", {})
    if m.get("available"):
        lines.append(
            f"  model (F10, IW {m['initial_window']}, load {m['load']:.2f}): mean queue "
            f"{m['mean_queue_packets_f10']:.1f} packets"
        )
    if not result["valid"]:
        lines.append("  FLAGGED: " + ", ".join(k for k, v in result["flags"].items() if v is False))
    if result.get("cautions"):
        lines.append("  " + describe_cautions(result["cautions"]))
    if out is not None:
        lines.append(f"result, transfers.csv, monitor data and plots written to {out}/")
    return "\n".join(lines)
