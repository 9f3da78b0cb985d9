"""Appenzeller 2004 Fig 12 measured: the smallest buffer that keeps short flows' average completion time
within 12.5 % of an unlimited buffer's (`bufsize shortexp fig12 --out DIR`, run by
series.run_series).

Fixed-length flows with Poisson arrivals at load 0.8, as Fig 10. Each (rate, length) point is one
run whose buffer steps down a ladder in place (ShortFlowOptions.ladder_packets): a first window at
2000 packets (the unlimited reference), then each smaller buffer, settled and measured as long.
The answer is the smallest buffer at which, and at every larger step, the AFCT of the point's flows
is within 12.5 % of the reference. Beside it, F11's buffer for an overflow probability of 1 % and
2.5 % (the seed's legend and its TR disagree on which), from the lengths sent and the initial window.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bufsize.shortflows.plots import finish_axes, pyplot, save_figure
from bufsize.shortflows.run import ShortFlowOptions
from bufsize.shortflows.series import finished_points, write_table
from bufsize.theory import model
from bufsize.topologies.config import DumbbellConfig, parse_rtts
from bufsize.topologies.errors import UsageError
from bufsize.topologies.units import packets_to_bytes
from bufsize.traffic.workload import Workload

AFCT_SLACK = 1.125


@dataclass
class Fig12Spec:
    rates_mbps: list[float] = field(default_factory=lambda: [5.0, 20.0])
    lengths: list[int] = field(default_factory=lambda: [2, 14, 30, 62, 100])
    ladder: list[int] = field(default_factory=lambda: [400, 200, 120, 80, 50, 30, 20, 12, 8, 5])
    reference_packets: int = 2000
    load: float = 0.8
    initcwnd: int = 2
    window_s: float = 30.0
    settle_s: float = 3.0
    warmup_s: float = 5.0
    hosts: int = 10
    rtt_ms: float = 20.0
    cc: str = "reno"
    seed: int = 1
    experiment: str = "fig12"

    def validate(self) -> None:
        if not self.rates_mbps or not self.lengths or not self.ladder:
            raise UsageError("give at least one rate, one length and one ladder buffer")
        if sorted(self.ladder, reverse=True) != self.ladder or self.ladder[0] >= self.reference_packets:
            raise UsageError("the ladder must step down from below the reference buffer")
        for p in self.points():
            p[1].validate()
            p[3].validate()

    def points(self) -> list[tuple[str, DumbbellConfig, int, ShortFlowOptions]]:
        out = []
        for rate in self.rates_mbps:
            cfg = DumbbellConfig(hosts=self.hosts, rate_mbps=rate, rtt_ms=parse_rtts(str(self.rtt_ms), self.hosts),
                                 cc=self.cc)  # fmt: skip
            steps = len(self.ladder)
            span = self.warmup_s + self.window_s * (1 + steps) + self.settle_s * steps + 1
            for n in self.lengths:
                w = Workload(sizes=f"fixed:{n}", load=self.load, seed=self.seed, timeout_s=60.0, duration_s=span)
                opts = ShortFlowOptions(w, 0, self.warmup_s, self.initcwnd, ladder_packets=list(self.ladder),
                                        ladder_window_s=self.window_s, ladder_settle_s=self.settle_s)  # fmt: skip
                out.append((f"r{rate:g}-l{n}", cfg, packets_to_bytes(self.reference_packets), opts))
        return out

    def report(self, out: Path, where: str = "this testbed") -> int:
        rows = fig12_rows(out, self)
        write_fig12_report(out, rows, self)
        return len(rows)


def afct(fct_bins: list[dict], length: int) -> float | None:
    b = next((b for b in fct_bins if b["packets"] == str(length)), None)
    return b["mean_s"] if b else None


def smallest_within(steps: list[tuple[int, float | None]], limit: float) -> int | None:
    """The smallest buffer whose AFCT and every larger step's AFCT is within `limit` (steps given
    from the largest buffer down); None if even the largest step misses it."""
    answer = None
    for b, a in steps:
        if a is None or a > limit:
            break
        answer = b
    return answer


def fig12_rows(out: Path, spec: Fig12Spec) -> list[dict]:
    rows = []
    for name, cfg, _b, r in finished_points(out, spec):
        length = int(name.split("-l")[1])
        ref = afct(r["fct_by_size"], length)
        steps = [(s["buffer_packets"], afct(s["fct_by_size"], length)) for s in r.get("ladder", [])]
        m = r.get("model", {})
        f11 = {}
        if m.get("available"):
            bm = model.BurstMoments(**m["burst_moments"])
            for p in (0.01, 0.025):
                f11[p] = round(model.buffer_for_overflow_probability(p, m["load"], bm), 1)
        rows.append(
            {
                "rate_mbps": cfg.rate_mbps,
                "packets": length,
                "initial_window": m.get("initial_window"),
                "load_offered": r["transfers"]["offered_load_in_window"],
                "afct_reference_s": ref,
                "min_buffer_packets": smallest_within(steps, AFCT_SLACK * ref) if ref else None,
                "f11_p01": f11.get(0.01),
                "f11_p025": f11.get(0.025),
                "afct_by_buffer": ";".join(f"{b}:{a:.4f}" for b, a in steps if a is not None),
                "valid": r["valid"],
            }
        )
    return rows


def write_fig12_report(out: Path, rows: list[dict], spec: Fig12Spec) -> None:
    if not rows:
        return
    lines = [
        "| rate Mb/s | flow length (pkts) | IW | offered load | AFCT at 2000 pkts (s) | smallest buffer within 12.5 % "
        "| F11, P = 1 % | F11, P = 2.5 % | valid |",
        "|" + "---|" * 9,
    ]
    for r in rows:
        ref = f"{r['afct_reference_s']:.4f}" if r["afct_reference_s"] else "-"
        lines.append(
            f"| {r['rate_mbps']:g} | {r['packets']} | {r['initial_window']} | {r['load_offered']:.3f} | {ref} | "
            f"{r['min_buffer_packets'] if r['min_buffer_packets'] is not None else 'none of the ladder'} | "
            f"{r['f11_p01']} | {r['f11_p025']} | {'yes' if r['valid'] else 'FLAGGED'} |"
        )
    write_table(out, rows, lines, lambda: plot_fig12(out, rows, spec), "fig12")


def plot_fig12(out: Path, rows: list[dict], spec: Fig12Spec) -> None:
    fig, ax = pyplot().subplots(figsize=(8, 4.5))
    for i, rate in enumerate(spec.rates_mbps):
        sel = sorted(
            (r for r in rows if r["rate_mbps"] == rate and r["min_buffer_packets"]), key=lambda r: r["packets"]
        )
        if sel:
            ax.plot([r["packets"] for r in sel], [r["min_buffer_packets"] for r in sel], "os^Dv"[i % 5] + "-", ms=4,
                    label=f"measured, {rate:g} Mb/s")  # fmt: skip
    for key, style, label in (("f11_p01", "k--", "F11, P = 1 %"), ("f11_p025", "k:", "F11, P = 2.5 %")):
        pts = sorted({(r["packets"], r[key]) for r in rows if r[key] is not None})
        if pts:
            ax.plot([p for p, _ in pts], [b for _, b in pts], style, lw=1, label=label)
    title = (f"Appenzeller 2004 Fig 12 here: AFCT within 12.5 % of a {spec.reference_packets}-packet buffer, "
             f"load {spec.load:g}, IW {spec.initcwnd}")  # fmt: skip
    finish_axes(ax, "flow length (packets)", "smallest buffer (packets)", title)
    save_figure(fig, out / "figure.png")
