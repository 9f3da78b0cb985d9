"""Dhamdhere 2006 Fig 1 measured: loss rate against buffer for three kinds of traffic
(`bufsize shortexp loss --out DIR`, run by series.run_series).

Dhamdhere and Dovrolis (2006) simulated a 50 Mb/s link, RTTs from 30 to 530 ms with a
harmonic mean of 60 ms (so a BDP of 250 packets), NewReno with SACK, and about 200 long flows:
- P, persistent: 200 long flows, plus mice of 3 to 25 packets at 5 % of the link (open loop);
- C, closed loop: users who think for an exponential 5 s between transfers whose sizes are a mix
  of exponentials with means 15, 50 and 200 packets;
- O, open loop: Poisson arrivals of the same sizes at 95 % of the link.
At the sqrt(N) buffer (250/sqrt(200) = 18 packets) it found loss rates of about 12 % (O) and 7-8 %
(P, C); at 500 packets under 1 % (O), about 2 % (P) and 4 % (C).

Here: the same link, 18 sender hosts with RTTs from 30 to 530 ms spread so that their harmonic
mean is 60 ms, Linux reno (NewReno with SACK). The seed does not give its class weights; the mix
here is 0.5, 0.35 and 0.15 (mean 55 packets). The number of closed-loop users that gives N near
200 depends on the machine; each point reports the flows active and in congestion avoidance
every second, so the N reached is measured, not assumed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bufsize.shortflows.plots import finish_axes, pyplot, save_figure
from bufsize.shortflows.run import ShortFlowOptions
from bufsize.shortflows.series import finished_points, write_table
from bufsize.theory import model
from bufsize.topologies.config import DumbbellConfig
from bufsize.topologies.errors import UsageError
from bufsize.topologies.units import check_buffer_bytes, packets_to_bytes
from bufsize.traffic.workload import Workload

# 18 RTTs from 30 to 530 ms, 30 x (530/30)^((i/17)^1.88), rounded: harmonic mean 60.0 ms.
SEED001_RTTS_MS = [30, 30, 32, 33, 36, 40, 45, 52, 60, 72, 86, 106, 133, 170, 220, 290, 389, 530]
SIZES = "expmix:0.5@15+0.35@50+0.15@200"
MICE = "uniform:3:25"
BDP_PACKETS = 250
# The seed's text (section 2.3 of the checklist): loss at B_s = 18 and B_l = 500 packets.
PUBLISHED = {"P": {18: 0.075, 500: 0.02}, "C": {18: 0.075, 500: 0.04}, "O": {18: 0.12, 500: 0.01}}
WORKLOADS = ("P", "C", "O")


@dataclass
class LossSpec:
    workloads: list[str] = field(default_factory=lambda: list(WORKLOADS))
    buffers: list[int] = field(default_factory=lambda: [18, 50, 100, 250, 500])
    rate_mbps: float = 50.0
    persistent_flows: int = 200
    users: int = 600
    think_s: float = 5.0
    open_load: float = 0.95
    duration_s: float = 60.0
    warmup_s: float = 20.0
    cc: str = "reno"
    seed: int = 1
    experiment: str = "loss"
    # ns-2's window cap (window_, 20 unless told otherwise) on every transfer; None: Linux's (none).
    max_window: int | None = None

    def validate(self) -> None:
        bad = [w for w in self.workloads if w not in WORKLOADS]
        if bad or not self.workloads:
            raise UsageError(f"--workloads: each of P, C, O (got {','.join(self.workloads)})")
        if not self.buffers:
            raise UsageError("give at least one buffer")
        if self.max_window is not None and "P" in self.workloads:
            raise UsageError("--max-window caps the short-flow generator's transfers; P's persistent flows are"
                             " iperf's and would run uncapped: give --workloads C,O")  # fmt: skip
        for b in self.buffers:
            check_buffer_bytes(packets_to_bytes(b), "--buffers")
        for p in self.points():
            p[1].validate()
            p[3].validate()

    def workload(self, kind: str) -> tuple[Workload, int]:
        """The short-flow workload and the number of long flows of one kind of traffic."""
        span = self.warmup_s + self.duration_s
        if kind == "P":
            return Workload(sizes=MICE, load=0.05, duration_s=span, seed=self.seed), self.persistent_flows
        if kind == "C":
            w = Workload(sizes=SIZES, users=self.users, think_s=self.think_s, duration_s=span, seed=self.seed)
            return w, 0
        return Workload(sizes=SIZES, load=self.open_load, duration_s=span, seed=self.seed), 0

    def points(self) -> list[tuple[str, DumbbellConfig, int, ShortFlowOptions]]:
        out = []
        cfg = DumbbellConfig(hosts=len(SEED001_RTTS_MS), rate_mbps=self.rate_mbps,
                             rtt_ms=[float(r) for r in SEED001_RTTS_MS], cc=self.cc)  # fmt: skip
        for kind in self.workloads:
            w, long_flows = self.workload(kind)
            for b in self.buffers:
                opts = ShortFlowOptions(
                    w, long_flows, self.warmup_s, max_window=self.max_window,
                    long_warmup_s=self.warmup_s if long_flows else None,
                )  # fmt: skip
                out.append((f"{kind}-b{b}", cfg, packets_to_bytes(b), opts))
        return out

    def report(self, out: Path, where: str = "this testbed") -> int:
        rows = loss_rows(out, self)
        write_loss_report(out, rows, self, where)
        return len(rows)


def loss_rows(out: Path, spec: LossSpec) -> list[dict]:
    rows = []
    for name, _cfg, _b, r in finished_points(out, spec):
        kind, b = name.split("-b")
        ca = r.get("flows_in_congestion_avoidance", {})
        thr = r.get("long_flow_throughput", {})
        rows.append(
            {
                "workload": kind,
                "buffer_packets": int(b),
                "loss_rate": r["loss_rate"],
                "utilization": r["utilization"],
                "flows_in_ca_mean": ca.get("mean"),
                "flows_active_mean": ca.get("active_mean"),
                "transfers_done": r["transfers"]["in_window"]["done"],
                "offered_load": r["transfers"]["offered_load_in_window"],
                "long_flow_median_mbps": thr.get("median_mbps"),
                "f16_loss": round(model.loss_rate_persistent(spec.persistent_flows, BDP_PACKETS, int(b)), 4)
                if kind == "P"
                else None,
                "published_loss": PUBLISHED[kind].get(int(b)),
                "valid": r["valid"],
            }
        )
    return rows


def write_loss_report(out: Path, rows: list[dict], spec: LossSpec, where: str = "this testbed") -> None:
    if not rows:
        return
    lines = [
        "| traffic | buffer (pkts) | loss | published (Dhamdhere 2006) | F16 | utilization | flows in CA (mean) | "
        "flows active | transfers | offered load | valid |",
        "|" + "---|" * 11,
    ]
    for r in rows:
        pub = f"{r['published_loss']:.1%}" if r["published_loss"] is not None else "-"
        f16 = f"{r['f16_loss']:.1%}" if r["f16_loss"] is not None else "-"
        lines.append(
            f"| {r['workload']} | {r['buffer_packets']} | {r['loss_rate']:.2%} | {pub} | {f16} | "
            f"{r['utilization']:.3f} | {r['flows_in_ca_mean']} | {r['flows_active_mean']} | {r['transfers_done']} | "
            f"{r['offered_load']:.3f} | {'yes' if r['valid'] else 'FLAGGED'} |"
        )
    write_table(out, rows, lines, lambda: plot_loss(out, rows, spec, where), "loss")


def plot_loss(out: Path, rows: list[dict], spec: LossSpec, where: str = "this testbed") -> None:
    fig, ax = pyplot().subplots(figsize=(8, 4.5))
    names = {"P": "persistent + mice", "C": "closed loop", "O": "open loop"}
    for i, kind in enumerate(spec.workloads):
        sel = sorted((r for r in rows if r["workload"] == kind), key=lambda r: r["buffer_packets"])
        color = f"C{i}"
        if sel:
            ax.plot([r["buffer_packets"] for r in sel], [100 * r["loss_rate"] for r in sel], "o-", color=color,
                    ms=4, label=f"{names[kind]} (measured)")  # fmt: skip
        pub = PUBLISHED[kind]
        ax.plot(
            list(pub), [100 * v for v in pub.values()], "x", color=color, ms=8, label=f"{names[kind]} (Dhamdhere 2006)"
        )
    if "P" in spec.workloads:
        bs = sorted(spec.buffers)
        f16 = [100 * model.loss_rate_persistent(spec.persistent_flows, BDP_PACKETS, b) for b in bs]
        ax.plot(bs, f16, "k:", lw=1, label="F16 (persistent)")
    ax.axvline(BDP_PACKETS / spec.persistent_flows**0.5, color="grey", ls="--", lw=0.8, label="RTT*C/sqrt(200)")
    ax.set_ylim(bottom=0)
    title = f"Dhamdhere 2006 Fig 1 on {where}: {spec.rate_mbps:g} Mb/s, RTT 30-530 ms (harmonic 60), {spec.cc}"
    finish_axes(ax, "buffer (packets)", "loss rate (%)", title)
    save_figure(fig, out / "figure.png")
