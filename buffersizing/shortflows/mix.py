"""Appenzeller 2004 Figs 13-14 measured: long flows plus 20 % of short 14-packet flows, at RTT*C/sqrt(n)
and at RTT*C (`bufsize shortexp mix --out DIR`, run by series.run_series).

Appenzeller 2004 ran n = 1 to 500 long Reno flows and Poisson 14-packet flows offering 20 % of a 400 Mb/s
link: with n above about 200 the flows no longer synchronize and a buffer near RTT*C/sqrt(n) keeps
utilization (Fig 13), and the short flows' average completion time is "much shorter" there than
with RTT*C (Fig 14). Here: the paper's 62.5 Mb/s link (this machine carries it with the line
shaper), RTTs spread from 80 to 120 ms over the hosts so long flows desynchronize (as util-table),
reno, and the same 20 % of 14-packet flows (initial window 2, as the seed's model).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from bufsize.shortflows.plots import finish_axes, pyplot, save_figure
from bufsize.shortflows.run import ShortFlowOptions
from bufsize.shortflows.series import finished_points, write_table
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.config import DumbbellConfig, parse_rtts
from bufsize.topologies.errors import UsageError
from bufsize.topologies.units import packets_to_bytes
from bufsize.traffic.workload import Workload

BUFFERS = ("sqrtn", "bdp")
SHORT_PACKETS = 14


@dataclass
class MixSpec:
    long_flows: list[int] = field(default_factory=lambda: [10, 50, 100, 200, 400])
    rate_mbps: float = 62.5
    rtt_ms: str = "80..120"
    short_load: float = 0.2
    initcwnd: int = 2
    max_hosts: int = 100
    duration_s: float = 60.0
    warmup_s: float = 20.0
    cc: str = "reno"
    seed: int = 1
    experiment: str = "mix"

    def validate(self) -> None:
        if not self.long_flows:
            raise UsageError("give at least one number of long flows")
        for p in self.points():
            p[1].validate()
            p[3].validate()

    def config(self, n: int) -> DumbbellConfig:
        hosts = min(n, self.max_hosts)
        return DumbbellConfig(hosts=hosts, rate_mbps=self.rate_mbps, rtt_ms=parse_rtts(self.rtt_ms, hosts), cc=self.cc)

    def buffer_packets(self, cfg: DumbbellConfig, n: int, kind: str) -> int:
        """RTT*C (mean RTT, as Appenzeller 2004) or that over sqrt(n)."""
        bdp = cfg.rate_mbps * 1e6 / 8 * statistics.fmean(cfg.rtt_ms) / 1000 / FRAME_BYTES
        return max(1, round(bdp if kind == "bdp" else bdp / math.sqrt(n)))

    def points(self) -> list[tuple[str, DumbbellConfig, int, ShortFlowOptions]]:
        out = []
        for n in self.long_flows:
            cfg = self.config(n)
            w = Workload(sizes=f"fixed:{SHORT_PACKETS}", load=self.short_load,
                         duration_s=self.warmup_s + self.duration_s, seed=self.seed)  # fmt: skip
            for kind in BUFFERS:
                opts = ShortFlowOptions(w, n, self.warmup_s, self.initcwnd, long_warmup_s=self.warmup_s)
                out.append((f"n{n}-{kind}", cfg, packets_to_bytes(self.buffer_packets(cfg, n, kind)), opts))
        return out

    def report(self, out: Path, where: str = "this testbed") -> int:
        rows = mix_rows(out, self)
        write_mix_report(out, rows, self, where)
        return len(rows)


def mix_rows(out: Path, spec: MixSpec) -> list[dict]:
    rows = []
    for name, _cfg, buffer_bytes, r in finished_points(out, spec):
        n, kind = name.removeprefix("n").split("-")
        short = next((b for b in r["fct_by_size"] if b["packets"] == str(SHORT_PACKETS)), {})
        ca = r.get("flows_in_congestion_avoidance", {})
        rows.append(
            {
                "long_flows": int(n),
                "buffer": kind,
                "buffer_packets": round(buffer_bytes / FRAME_BYTES),
                "utilization": r["utilization"],
                "loss_rate": r["loss_rate"],
                "short_transfers": short.get("transfers"),
                "afct_s": short.get("mean_s"),
                "fct_median_s": short.get("median_s"),
                "fct_p95_s": short.get("p95_s"),
                "long_in_ca_mean": ca.get("mean"),
                "valid": r["valid"],
            }
        )
    return rows


def write_mix_report(out: Path, rows: list[dict], spec: MixSpec, where: str = "this testbed") -> None:
    if not rows:
        return
    lines = [
        "| long flows | buffer | packets | utilization | loss | 14-packet flows | AFCT s | median | p95 | "
        "long flows in CA | valid |",
        "|" + "---|" * 11,
    ]
    for r in rows:
        afct = f"{r['afct_s']:.3f}" if r["afct_s"] is not None else "-"
        med = f"{r['fct_median_s']:.3f}" if r["fct_median_s"] is not None else "-"
        p95 = f"{r['fct_p95_s']:.3f}" if r["fct_p95_s"] is not None else "-"
        lines.append(
            f"| {r['long_flows']} | {'RTT*C/sqrt(n)' if r['buffer'] == 'sqrtn' else 'RTT*C'} | {r['buffer_packets']} | "
            f"{r['utilization']:.4f} | {r['loss_rate']:.3%} | {r['short_transfers']} | {afct} | {med} | {p95} | "
            f"{r['long_in_ca_mean']} | {'yes' if r['valid'] else 'FLAGGED'} |"
        )
    write_table(out, rows, lines, lambda: plot_mix(out, rows, spec, where), "mix")


def plot_mix(out: Path, rows: list[dict], spec: MixSpec, where: str = "this testbed") -> None:
    fig, (a1, a2) = pyplot().subplots(1, 2, figsize=(10, 4))
    for kind, style, label in (("sqrtn", "o-", "RTT*C/sqrt(n)"), ("bdp", "s--", "RTT*C")):
        sel = sorted((r for r in rows if r["buffer"] == kind), key=lambda r: r["long_flows"])
        if not sel:
            continue
        xs = [r["long_flows"] for r in sel]
        a1.plot(xs, [r["afct_s"] for r in sel], style, ms=4, label=label)
        a2.plot(xs, [100 * r["utilization"] for r in sel], style, ms=4, label=label)
    finish_axes(a1, "long-lived flows n", f"AFCT of {SHORT_PACKETS}-packet flows (s)")
    finish_axes(a2, "long-lived flows n", "utilization (%)")
    fig.suptitle(f"Appenzeller 2004 Figs 13-14 on {where}: {spec.rate_mbps:g} Mb/s, RTT {spec.rtt_ms} ms, {spec.cc}, "
                 f"{spec.short_load:.0%} of {SHORT_PACKETS}-packet flows", fontsize=9)  # fmt: skip
    save_figure(fig, out / "figure.png")
