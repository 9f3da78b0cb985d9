"""Short-flow experiments on the ns-3 twin: `bufsize sim shortexp loss|mix`.

Dhamdhere 2006 Fig 1 (buffersizing/shortflows/loss.py) point for point: the same LossSpec, link (18
hosts, RTTs 30-530 ms, harmonic mean 60), workloads and buffers, and the same transfers. The
open-loop arrivals, sizes and users' think times are drawn exactly as the emulated generator draws
them (traffic/generator.py: the same seeds, the same order), so both testbeds offer the same
transfers; only TCP and the link differ. Timeline as emulated: long flows warm up, then the short
flows start, and the window measured is from warmup_s after their start to duration_s.

Appenzeller 2004 Figs 13-14 (shortflows/mix.py) the same way: long flows plus 20 % of 14-packet flows at
RTT*C/sqrt(n) and RTT*C, with the series' own initial window (2).

The series is the emulated one (shortflows/series.py run_series), its points run by TwinPoints, and
its directory is read by the emulated report: same point names, result keys where they mean the same
(loss_rate, utilization, transfers, fct_by_size, valid). Flows in congestion avoidance and
retransmissions per transfer are not counted here (None). beside.md puts twin and emulation side by side.
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from bufsize.scaffold.experiment import Say
from bufsize.scaffold.resultdir import read_finished, write_json_atomic
from bufsize.scaffold.schema import stamp
from bufsize.scaffold.twin import simulator_manifest
from bufsize.shortflows.loss import PUBLISHED, LossSpec, loss_rows
from bufsize.shortflows.mix import MixSpec, mix_rows
from bufsize.shortflows.run import ShortFlowOptions
from bufsize.shortflows.series import SeriesSpec
from bufsize.shortflows.stats import fct_by_size, offered_load, started_between, transfer_counts
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.config import DumbbellConfig
from bufsize.topologies.errors import UsageError
from bufsize.topologies.nssim import SimConfig, SimDumbbell, SimTransfer
from bufsize.topologies.safefiles import write_atomic
from bufsize.traffic.workload import Workload, open_loop_arrivals, think_time

MAX_USER_CYCLES = 10_000  # (think, size) pairs given to one user: a user with no think time stops there


@dataclass(frozen=True)
class TwinTcp:
    """What the twin's TCP may be told beyond the emulation's: to ask what the seeds' ns-2 saw."""

    iw: int = 10
    rto: str = "linux"


def sim_config(cfg: DumbbellConfig, seed: int, tcp: TwinTcp = TwinTcp()) -> SimConfig:
    rtts = [float(r) for r in cfg.rtt_ms]
    return SimConfig(cfg.hosts, cfg.rate_mbps, rtts, cfg.cc, seed=seed, iw=tcp.iw, rto=tcp.rto)


def open_transfers(w: Workload, hosts: int, rate_mbps: float) -> list[tuple[float, int, int]]:
    """(seconds from the short flows' start, host, bytes) of the open-loop arrivals, drawn as the
    emulated generator draws them (times from Random(seed), sizes from Random(seed + 1))."""
    if w.load <= 0:
        return []
    dist = w.validate()
    times, sizes = random.Random(w.seed), random.Random(w.seed + 1)
    arrivals = open_loop_arrivals(w.arrival_rate(rate_mbps), times, w.transfers, w.duration_s)
    return [(t, k % hosts, dist.draw(sizes)) for k, t in enumerate(arrivals)]


def user_cycles(w: Workload, user: int) -> list[tuple[float, int]]:
    """(think seconds, bytes) of one closed-loop user, drawn as the emulated generator draws them:
    think first, then the size, from Random(seed * 100003 + 7 + user); enough for the workload's
    duration even if every transfer took no time."""
    dist = w.validate()
    rng = random.Random(w.seed * 100_003 + 7 + user)
    out: list[tuple[float, int]] = []
    total = 0.0
    limit = min(w.transfers or MAX_USER_CYCLES, MAX_USER_CYCLES)
    while len(out) < limit and total <= (w.duration_s if w.duration_s is not None else float("inf")):
        think = think_time(w, rng)
        out.append((think, dist.draw(rng)))
        total += think
    return out


def run_point(cfg: DumbbellConfig, buffer_bytes: int, opts: ShortFlowOptions, seed: int, tcp: TwinTcp) -> dict:
    """One point of a short-flow series on the twin; the result fields the emulated report reads."""
    w = opts.workload
    w.validate()
    if w.duration_s is None:
        raise UsageError("the twin runs short flows for a --duration, not a number of --transfers")
    if opts.max_window is not None:
        raise UsageError("the twin does not cap the window (--max-window): its receive buffers are 64 MB")
    if opts.initcwnd is not None:  # the series' own initial window (mix: 2), as the emulation sets it
        tcp = replace(tcp, iw=opts.initcwnd)
    sc = sim_config(cfg, seed, tcp)
    packets = max(1, round(buffer_bytes / FRAME_BYTES))
    long_warm = (opts.long_warmup_s or 0.0) if opts.long_flows else 0.0
    wall0 = time.monotonic()
    with SimDumbbell(sc, opts.long_flows, packets, short_flows=True) as net:
        t0 = long_warm  # the short flows start when the long flows have warmed up
        for t, host, size in open_transfers(w, sc.hosts, sc.rate_mbps):
            net.add_transfer(t0 + t, host, size)
        for u in range(w.users):
            net.add_user(u % sc.hosts, t0 + w.duration_s, [(th + (t0 if i == 0 else 0), b)
                         for i, (th, b) in enumerate(user_cycles(w, u))])  # fmt: skip
        if t0 > 0:
            net.run(t0)
        if opts.warmup_s > 0:
            net.run(opts.warmup_s)
        window = net.run(w.duration_s - opts.warmup_s)
        flows_up = net.flows_up()
        rows = net.transfers()
    start, end = t0 + opts.warmup_s, window.t1
    all_rows = [as_row(r) for r in rows]
    in_window = started_between(all_rows, start, end)
    seconds = window.t1 - window.t0
    return {
        "kind": "sim-shortflows",
        "buffer_packets": packets,
        "buffer_bytes": packets * FRAME_BYTES,
        "workload": w.to_dict(),
        "long_flows": opts.long_flows,
        "long_flows_up": flows_up,
        "window_seconds": round(seconds, 3),
        "utilization": round(window.bytes * 8 / seconds / 1e6 / sc.rate_mbps, 5),
        "loss_rate": round(window.drops / max(1, window.packets + window.drops), 6),
        "bottleneck_drops": window.drops,
        "packets_sent": window.packets,
        "queue": {"mean_packets": round(window.queue_mean, 2), "max_packets": window.queue_max},
        "transfers": {
            "all": transfer_counts(all_rows),
            "in_window": transfer_counts(in_window),
            "offered_load_in_window": round(offered_load(in_window, seconds, sc.rate_mbps), 4),
        },
        "fct_s": fct_summary(in_window),
        "fct_by_size": fct_by_size(in_window),  # the emulated report's bins
        "flows_in_congestion_avoidance": {},  # not counted on the twin
        "long_flow_throughput": {},
        # The simulation is exact; a point is flagged only if a long flow never got going.
        "valid": flows_up == opts.long_flows,
        "seed": seed,
        "simulated_seconds": round(window.t1, 3),
        "wall_seconds": round(time.monotonic() - wall0, 1),
        "config": sc.to_dict(),
        "manifest": simulator_manifest(sc),
    }


def as_row(r: SimTransfer) -> dict:
    """A transfer as the emulated generator records one, as far as the twin knows it: no retransmissions,
    and none failed (the twin has no transfer timeout), only done or unfinished."""
    return {"status": "unfinished" if r.done is None else "done", "size_bytes": r.size_bytes, "fct_s": r.fct_s,
            "t_start": r.start}  # fmt: skip


def fct_summary(rows: list[dict]) -> dict:
    fcts = sorted(r["fct_s"] for r in rows if r["status"] == "done")
    if not fcts:
        return {"count": 0}
    return {"count": len(fcts), "mean": round(statistics.fmean(fcts), 4), "median": round(statistics.median(fcts), 4),
            "p95": round(fcts[min(len(fcts) - 1, int(0.95 * len(fcts)))], 4)}  # fmt: skip


TwinSpec = LossSpec | MixSpec


@dataclass
class TwinPoints:
    """A series' points on the twin (shortflows/series.py run_series), each a simulation of its own."""

    spec: TwinSpec
    tcp: TwinTcp = TwinTcp()
    where: str = "the ns-3 twin"

    def __post_init__(self) -> None:
        sim_config(self.spec.points()[0][1], self.spec.seed, self.tcp).validate(0, short_flows=True)
        self.header = {"simulator": "ns-3", "tcp": asdict(self.tcp)}

    def manifest(self, spec: SeriesSpec) -> dict:
        return simulator_manifest(sim_config(spec.points()[0][1], self.spec.seed, self.tcp))

    def run_point(self, cfg: DumbbellConfig, buffer_bytes: int, opts: ShortFlowOptions, d: Path, log: Say) -> None:
        r = run_point(cfg, buffer_bytes, opts, self.spec.seed, self.tcp)
        write_json_atomic(d / "result.json", stamp(r, "result"))
        log(f"  loss {r['loss_rate']:.2%}, utilization {r['utilization']:.4f}, "
            f"{r['transfers']['in_window']['done']} transfers done, {r['wall_seconds']:.0f} s of wall")  # fmt: skip


def write_beside(out: Path, spec: TwinSpec, emulated: Path) -> None:
    """beside.md: the twin's series at `out` point for point beside the emulated one at `emulated`."""
    if isinstance(spec, LossSpec):
        text = loss_beside(loss_rows(out, spec), loss_rows(emulated, spec))
    else:
        text = mix_beside(mix_rows(out, spec), mix_rows(emulated, spec))
    write_atomic(out / "beside.md", text)


def mix_beside(twin: list[dict], emulated: list[dict]) -> str:
    emu = {(r["long_flows"], r["buffer"]): r for r in emulated}
    lines = [
        "| long flows | buffer | packets | twin utilization | emulation utilization | twin loss | emulation loss | "
        "twin AFCT s | emulation AFCT s | emulation / twin AFCT |",
        "|" + "---|" * 10,
    ]
    for r in twin:
        e = emu.get((r["long_flows"], r["buffer"]))
        ratio = f"{e['afct_s'] / r['afct_s']:.2f}" if e and e["afct_s"] and r["afct_s"] else "-"
        lines.append(
            f"| {r['long_flows']} | {'RTT*C/sqrt(n)' if r['buffer'] == 'sqrtn' else 'RTT*C'} | {r['buffer_packets']} | "
            f"{r['utilization']:.4f} | {format(e['utilization'], '.4f') if e else '-'} | {r['loss_rate']:.2%} | "
            f"{format(e['loss_rate'], '.2%') if e else '-'} | {_s(r['afct_s'])} | {_s(e['afct_s']) if e else '-'} | "
            f"{ratio} |"
        )
    return "\n".join(lines) + "\n"


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def loss_beside(twin: list[dict], emulated: list[dict]) -> str:
    emu = {(r["workload"], r["buffer_packets"]): r for r in emulated}
    lines = [
        "| traffic | buffer (pkts) | twin loss | emulation loss | emulation / twin | published | twin utilization | "
        "emulation utilization |",
        "|" + "---|" * 8,
    ]
    for r in twin:
        e = emu.get((r["workload"], r["buffer_packets"]))
        pub = PUBLISHED[r["workload"]].get(r["buffer_packets"])
        ratio = f"{e['loss_rate'] / r['loss_rate']:.2f}" if e and r["loss_rate"] > 0 else "-"
        lines.append(
            f"| {r['workload']} | {r['buffer_packets']} | {r['loss_rate']:.2%} | "
            f"{format(e['loss_rate'], '.2%') if e else '-'} | {ratio} | {format(pub, '.1%') if pub else '-'} | "
            f"{r['utilization']:.3f} | {format(e['utilization'], '.3f') if e else '-'} |"
        )
    return "\n".join(lines) + "\n"


def check_beside(series: Path, spec: TwinSpec) -> None:
    """An emulated series of the same experiment run with the same settings, or a UsageError (before
    any simulation)."""
    data = read_finished(series / "series.json")
    if data is None or data.get("experiment") != spec.experiment:
        raise UsageError(f"--beside {series}: not a {spec.experiment} series (no series.json naming it)")
    if data.get("spec") != asdict(spec):
        raise UsageError(f"--beside {series}: run with other settings than these; give the same options")
