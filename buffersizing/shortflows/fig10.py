"""Appenzeller 2004 Fig 10 (and Fig 16's tail) measured: `bufsize shortexp fig10 --out DIR` (run by
series.run_series).

Short fixed-length flows with Poisson arrivals at load 0.8 through a large buffer, for several flow
lengths and link rates. Each (rate, length) point is one `shortflows` run in DIR/r<rate>-l<length>/;
re-running the same command skips finished points (DIR/series.json holds the settings, and other
settings are refused). At the end, DIR/table.md and DIR/figure.png put the measured mean queue
beside F10 and the measured tail decay beside F11's kappa, both computed from the lengths sent and
the initial window the kernel used (Appenzeller 2004 assumed 2 packets; `--initcwnd 2` is the default here).

Sized for a 2-core machine: the seed used 40, 80 and 200 Mb/s; the generator's capacity here
(bench/results/shortflow-capacity/) sets the rates to 5, 10 and 20 Mb/s. The model says the
queue depends on the load and the burst sizes only, not on the rate, so the comparison holds;
except for flows of one burst, whose start waits on the queue through their SYN, so that their
queue grows with RTT x C (bench/results/shortflow-handshake/).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bufsize.shortflows.plots import finish_axes, pyplot, save_figure
from bufsize.shortflows.run import ShortFlowOptions
from bufsize.shortflows.series import finished_points, write_table
from bufsize.theory import model
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.config import DumbbellConfig, parse_rtts
from bufsize.topologies.errors import UsageError
from bufsize.topologies.units import packets_to_bytes
from bufsize.traffic.workload import Workload


@dataclass
class Fig10Spec:
    rates_mbps: list[float] = field(default_factory=lambda: [5.0, 10.0, 20.0])
    lengths: list[int] = field(default_factory=lambda: [2, 6, 14, 16, 30, 62, 100])
    load: float = 0.8
    initcwnd: int = 2
    duration_s: float = 40.0
    warmup_s: float = 5.0
    hosts: int = 10
    rtt_ms: float = 20.0
    buffer_packets: int = 2000  # large: the queue the model describes is not cut by drops
    cc: str = "reno"
    seed: int = 1
    experiment: str = "fig10"

    def validate(self) -> None:
        if not self.rates_mbps or not self.lengths:
            raise UsageError("give at least one rate and one length")
        for n in self.lengths:
            if not 1 <= n <= 10_000:
                raise UsageError(f"--lengths: {n} packets must be from 1 to 10000")
        for p in self.points():
            p[1].validate()
            p[3].validate()

    def points(self) -> list[tuple[str, DumbbellConfig, int, ShortFlowOptions]]:
        out = []
        for rate in self.rates_mbps:
            for n in self.lengths:
                cfg = DumbbellConfig(hosts=self.hosts, rate_mbps=rate, rtt_ms=parse_rtts(str(self.rtt_ms), self.hosts),
                                     cc=self.cc)  # fmt: skip
                w = Workload(sizes=f"fixed:{n}", load=self.load, duration_s=self.warmup_s + self.duration_s,
                             seed=self.seed, timeout_s=60.0)  # fmt: skip
                opts = ShortFlowOptions(w, 0, self.warmup_s, self.initcwnd)
                out.append((f"r{rate:g}-l{n}", cfg, packets_to_bytes(self.buffer_packets), opts))
        return out

    def report(self, out: Path, where: str = "this testbed") -> int:
        """table.md, table.csv and figure.png from the finished points; how many there are."""
        rows = fig10_rows(out, self)
        write_fig10_report(out, rows, self)
        return len(rows)


def fig10_rows(out: Path, spec: Fig10Spec) -> list[dict]:
    rows = []
    for name, cfg, _b, r in finished_points(out, spec):
        m = r.get("model", {})
        fct = {b["packets"]: b for b in r.get("fct_by_size", [])}
        length = int(name.split("-l")[1])
        rows.append(
            {
                "rate_mbps": cfg.rate_mbps,
                "packets": length,
                "initial_window": m.get("initial_window"),
                "load_offered": r["transfers"]["offered_load_in_window"],
                "utilization": r["utilization"],
                "transfers": r["transfers"]["in_window"]["done"],
                # Full-size frames (bytes / 1514), the model's unit; frames of any size beside it.
                "mean_queue": round(r["queue"]["mean_bytes"] / FRAME_BYTES, 2) if "mean_bytes" in r["queue"] else None,
                "mean_queue_frames": r["queue"].get("mean_packets"),
                "f10_mean_queue": m.get("mean_queue_packets_f10"),
                "kappa_measured": r.get("queue_tail_kappa"),
                "kappa_f11": m.get("kappa_f11"),
                "loss_rate": r["loss_rate"],
                "fct_median_ms": round(fct[str(length)]["median_s"] * 1e3, 2) if str(length) in fct else None,
                "late_p99_ms": round(r["transfers"]["open_loop_lateness"].get("p99_s", 0) * 1e3, 2),
                "valid": r["valid"],
            }
        )
    return rows


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "-"


def write_fig10_report(out: Path, rows: list[dict], spec: Fig10Spec) -> None:
    if not rows:
        return
    head = ("| rate Mb/s | flow length (pkts) | IW | offered load | transfers | mean queue (full-size pkts) | F10 | "
            "measured/F10 | tail kappa | F11 kappa | kappa ratio | loss | FCT median ms | valid |")  # fmt: skip
    lines = [head, "|" + "---|" * 14]
    for r in rows:
        lines.append(
            f"| {r['rate_mbps']:g} | {r['packets']} | {r['initial_window']} | {r['load_offered']:.3f} | "
            f"{r['transfers']} | {r['mean_queue']} | {r['f10_mean_queue']} | "
            f"{_ratio(r['mean_queue'], r['f10_mean_queue'])} | {r['kappa_measured']} | {r['kappa_f11']} | "
            f"{_ratio(r['kappa_measured'], r['kappa_f11'])} | {r['loss_rate']:.4%} | {r['fct_median_ms']} | "
            f"{'yes' if r['valid'] else 'FLAGGED'} |"
        )
    write_table(out, rows, lines, lambda: plot_fig10(out, rows, spec), "fig10")


def plot_fig10(out: Path, rows: list[dict], spec: Fig10Spec) -> None:
    fig, ax = pyplot().subplots(figsize=(8, 4.5))
    marks = "os^Dv"
    for i, rate in enumerate(spec.rates_mbps):
        sel = sorted((r for r in rows if r["rate_mbps"] == rate), key=lambda r: r["packets"])
        if sel:
            ax.plot([r["packets"] for r in sel], [r["mean_queue"] for r in sel], marks[i % 5] + "-", ms=4, lw=0.8,
                    label=f"measured, {rate:g} Mb/s")  # fmt: skip
    # The model at the nominal load (the table's ratios use each run's measured load).
    lengths = sorted({r["packets"] for r in rows})
    f10 = [model.mean_queue_packets(spec.load, model.flow_mix_moments([(n, 1.0)], iw=spec.initcwnd)) for n in lengths]
    ax.plot(lengths, f10, "k--", lw=1, label=f"F10 (M/G/1 bursts, IW {spec.initcwnd}, load {spec.load:g})")
    title = (f"Appenzeller 2004 Fig 10 on this testbed: Poisson short flows at load {spec.load:g}, {spec.cc}, "
             f"buffer {spec.buffer_packets}")  # fmt: skip
    finish_axes(ax, "flow length (packets)", "mean queue (full-size packets)", title)
    save_figure(fig, out / "figure.png")
