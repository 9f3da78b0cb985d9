"""Tomioka's transfer times measured: web users at a BDP buffer and at a sqrt(N) buffer
(`bufsize shortexp transfer --out DIR`, run by series.run_series).

Tomioka, Hasegawa and Murata simulated SURGE web users on a 100 Mb/s dumbbell with 5 ms
access links, bottleneck delays D of 20 and 90 ms (round trips of 60 and 200 ms), and compared the
"normal" buffer C x RTT with the "sqrtN" buffer C x RTT / sqrt(N): sqrtN lost more packets at every
point, its transfer-time penalty small at D = 20 ms and larger at 90 ms (Figs 4-5).

Here: N closed-loop users on 50 sender hosts, SURGE sizes (`web`: lognormal body, Pareto tail)
and Pareto OFF times of shape 1.5 and mean 3 s (k = 1 s), reno, the two RTTs and the two buffers.
By arithmetic, not yet a run: 500 users would offer about 0.8 of 100 Mb/s (60 KB a transfer, one
every 3 s or so each). The seed's N
runs to 2000 hosts; this machine's generator is sized in bench/results/shortflow-capacity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from bufsize.shortflows.plots import finish_axes, pyplot, save_figure
from bufsize.shortflows.run import ShortFlowOptions
from bufsize.shortflows.series import finished_points, write_table
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.config import DumbbellConfig
from bufsize.topologies.errors import UsageError
from bufsize.topologies.units import packets_to_bytes
from bufsize.traffic.workload import Workload

BUFFERS = ("normal", "sqrtn")


@dataclass
class TransferSpec:
    rtts_ms: list[float] = field(default_factory=lambda: [60.0, 200.0])
    users: int = 500
    hosts: int = 50
    rate_mbps: float = 100.0
    think_s: float = 3.0
    duration_s: float = 120.0
    warmup_s: float = 20.0
    cc: str = "reno"
    seed: int = 1
    experiment: str = "transfer"
    # ns-2's TCP, which the seed ran, starts at 2 packets and caps the window at 20 (windowInit_,
    # window_); None here: Linux's 10 and no cap but the buffers'.
    initcwnd: int | None = None
    max_window: int | None = None

    def validate(self) -> None:
        if not self.rtts_ms:
            raise UsageError("give at least one RTT")
        if self.users < 1:
            raise UsageError(f"--users {self.users}: at least 1")
        for p in self.points():
            p[1].validate()
            p[3].validate()

    def buffer_packets(self, rtt_ms: float, kind: str) -> int:
        bdp = self.rate_mbps * 1e6 / 8 * rtt_ms / 1000 / FRAME_BYTES
        return max(1, round(bdp if kind == "normal" else bdp / math.sqrt(self.users)))

    def points(self) -> list[tuple[str, DumbbellConfig, int, ShortFlowOptions]]:
        out = []
        for rtt in self.rtts_ms:
            cfg = DumbbellConfig(hosts=self.hosts, rate_mbps=self.rate_mbps, rtt_ms=[rtt] * self.hosts, cc=self.cc)
            w = Workload(sizes="web", users=self.users, think_s=self.think_s, think="pareto",
                         duration_s=self.warmup_s + self.duration_s, seed=self.seed)  # fmt: skip
            for kind in BUFFERS:
                opts = ShortFlowOptions(w, 0, self.warmup_s, self.initcwnd, max_window=self.max_window)
                out.append((f"rtt{rtt:g}-{kind}", cfg, packets_to_bytes(self.buffer_packets(rtt, kind)), opts))
        return out

    def report(self, out: Path, where: str = "this testbed") -> int:
        rows = transfer_rows(out, self)
        write_transfer_report(out, rows, self)
        return len({(r["rtt_ms"], r["buffer"]) for r in rows})


def transfer_rows(out: Path, spec: TransferSpec) -> list[dict]:
    """One row per (RTT, buffer, size bin): completion times, with the run's loss and utilization."""
    rows = []
    for name, _cfg, buffer_bytes, r in finished_points(out, spec):
        rtt, kind = name.removeprefix("rtt").split("-")
        for b in r["fct_by_size"]:
            rows.append(
                {
                    "rtt_ms": float(rtt),
                    "buffer": kind,
                    "buffer_packets": round(buffer_bytes / FRAME_BYTES),
                    "packets": b["packets"],
                    "packets_lo": b["packets_lo"],
                    "transfers": b["transfers"],
                    "fct_median_s": b["median_s"],
                    "fct_p95_s": b["p95_s"],
                    "with_retrans": b["with_retrans"],
                    "loss_rate": r["loss_rate"],
                    "utilization": r["utilization"],
                    "valid": r["valid"],
                }
            )
    return rows


def write_transfer_report(out: Path, rows: list[dict], spec: TransferSpec) -> None:
    if not rows:
        return
    lines = [
        "| RTT ms | size (pkts) | normal: transfers, median / p95 s, with retrans | "
        "sqrtN: transfers, median / p95 s, with retrans | median sqrtN/normal |",
        "|---|---|---|---|---|",
    ]
    runs = {}
    for r in rows:
        runs[(r["rtt_ms"], r["buffer"])] = (r["buffer_packets"], r["loss_rate"], r["utilization"], r["valid"])
    for rtt in spec.rtts_ms:
        bins = {r["packets"]: r["packets_lo"] for r in rows if r["rtt_ms"] == rtt}
        for label in sorted(bins, key=lambda k: bins[k]):
            cell = {r["buffer"]: r for r in rows if r["rtt_ms"] == rtt and r["packets"] == label}
            text = []
            for kind in BUFFERS:
                c = cell.get(kind)
                text.append(f"{c['transfers']}, {c['fct_median_s']:.3f} / {c['fct_p95_s']:.3f}, {c['with_retrans']:.0%}"
                            if c else "-")  # fmt: skip
            ratio = (f"{cell['sqrtn']['fct_median_s'] / cell['normal']['fct_median_s']:.2f}"
                     if len(cell) == 2 and cell["normal"]["fct_median_s"] > 0 else "-")  # fmt: skip
            lines.append(f"| {rtt:g} | {label} | {text[0]} | {text[1]} | {ratio} |")
    lines += ["", "| RTT ms | buffer | packets | loss | utilization | valid |", "|---|---|---|---|---|---|"]
    for (rtt, kind), (bp, loss, util, valid) in sorted(runs.items()):
        lines.append(f"| {rtt:g} | {kind} | {bp} | {loss:.3%} | {util:.3f} | {'yes' if valid else 'FLAGGED'} |")
    write_table(out, rows, lines, lambda: plot_transfer(out, rows, spec), "transfer")


def plot_transfer(out: Path, rows: list[dict], spec: TransferSpec) -> None:
    fig, axes = pyplot().subplots(1, len(spec.rtts_ms), figsize=(5 * len(spec.rtts_ms), 4), squeeze=False)
    for ax, rtt in zip(axes[0], spec.rtts_ms, strict=True):
        for kind, style in zip(BUFFERS, ("o-", "s--"), strict=True):
            sel = sorted((r for r in rows if r["rtt_ms"] == rtt and r["buffer"] == kind), key=lambda r: r["packets_lo"])
            if sel:
                bp = sel[0]["buffer_packets"]
                ax.plot([r["packets_lo"] for r in sel], [r["fct_median_s"] for r in sel], style, ms=4,
                        label=f"{kind} ({bp} packets), median")  # fmt: skip
                ax.plot([r["packets_lo"] for r in sel], [r["fct_p95_s"] for r in sel], style, ms=2, alpha=0.4,
                        label=f"{kind}, p95")  # fmt: skip
        ax.set_yscale("log")
        title = f"RTT {rtt:g} ms, {spec.users} web users, {spec.rate_mbps:g} Mb/s"
        finish_axes(ax, "transfer size (packets, bin start)", "transfer time (s)", title)
    fig.suptitle("Tomioka on this testbed: transfer time at C x RTT against C x RTT / sqrt(N)", fontsize=10)
    save_figure(fig, out / "figure.png")
