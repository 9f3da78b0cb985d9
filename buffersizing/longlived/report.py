"""The replication figure and its table: our minimum buffers per N beside theory, hardware and 2012.

Buffers are compared in bytes, because the hardware data set records bytes and the 2012 runs
counted 1500-byte packets while ours are 1514-byte frames.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from bufsize.longlived.curves import plot_curves
from bufsize.scaffold.cautions import table_note
from bufsize.scaffold.projectfiles import REFERENCE_DIR
from bufsize.scaffold.resultdir import read_finished
from bufsize.theory.ccrules import CcRule, rule_for
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.config import tcp_changes
from bufsize.topologies.errors import UsageError
from bufsize.topologies.safefiles import atomic_text, save_figure, write_atomic

HARDWARE_TSV = "hardware-netfpga-62.5mbps-87ms.tsv"
MININET_2012_TSV = "mininet-hifi-2012-62.5mbps-87ms.tsv"
# The one setting both reference sets were measured at: 62.5 Mb/s, every flow at 87 ms.
PUBLISHED_RATE_MBPS, PUBLISHED_RTT_MS = 62.5, 87.0


def read_tsv(path: Path) -> list[dict[str, str]]:
    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t"))


def reference_runs(name: str, ref_dir: Path = REFERENCE_DIR) -> dict[int, list[float]]:
    """Buffer bytes per number of flows from one reference file."""
    out: dict[int, list[float]] = {}
    for row in read_tsv(ref_dir / name):
        out.setdefault(int(row["flows"]), []).append(float(row["buffer_bytes"]))
    return out


def load_results(d: Path) -> list[dict]:
    files = sorted(d.glob("**/result.json"))
    if not files:
        raise UsageError(f"{d}: no result.json found (run `bufsize sweep --out {d}` first)")
    results = []
    for f in files:
        r = read_finished(f)
        if r is None:
            raise UsageError(f"{f}: not a JSON object (truncated, or not a result)")
        results.append(r)
    return results


def cv(values: list[float]) -> float | None:
    """Coefficient of variation (sample standard deviation over mean); None below two values."""
    if len(values) < 2 or statistics.mean(values) == 0:
        return None
    return statistics.stdev(values) / statistics.mean(values)


def sweep_rule(results: list[dict]) -> CcRule | None:
    """The buffer rule of the sweep's congestion control (theory/ccrules.py) where it is not Reno's
    RTT*C/sqrt(N), which the table and figure show anyway; None for Reno, a mix, or no rule."""
    ccs = {r.get("cc") for r in results}
    if len(ccs) != 1 or ccs == {"reno"}:
        return None
    try:
        return rule_for(str(ccs.pop()))
    except ValueError:
        return None


def like_published(results: list[dict]) -> bool:
    """Whether every result is at the published setting, so its answers compare with the hardware's and
    2012's; another rate, or RTTs spread about the same mean, would compare different experiments (a
    result that does not say its rate and RTT is not compared)."""
    return all(
        r.get("nominal_rate_mbps") == PUBLISHED_RATE_MBPS
        and r.get("rtt_ms_for_theory") == PUBLISHED_RTT_MS
        and r.get("rtt_ms_largest", PUBLISHED_RTT_MS) == PUBLISHED_RTT_MS  # written since spread RTTs
        for r in results
    )


def published_runs(results: list[dict], ref_dir: Path) -> tuple[dict[int, list[float]], dict[int, list[float]]]:
    """The hardware's and the 2012 emulation's runs per N, or none where the sweep's setting differs."""
    if not like_published(results):
        return {}, {}
    return reference_runs(HARDWARE_TSV, ref_dir), reference_runs(MININET_2012_TSV, ref_dir)


def summary_rows(results: list[dict], ref_dir: Path = REFERENCE_DIR) -> list[dict]:
    hw, old = published_runs(results, ref_dir)
    by_n: dict[int, list[dict]] = {}
    for r in results:
        by_n.setdefault(r["flows"], []).append(r)
    rule = sweep_rule(results)
    rows = []
    for n in sorted(by_n):
        rs = by_n[n]
        pk = [r["buffer_packets"] for r in rs]
        med_bytes = statistics.median(pk) * FRAME_BYTES
        theory_pk = rs[0]["theory_sqrt_n_packets"]
        hw_med = statistics.median(hw[n]) if n in hw else None
        old_med = statistics.median(old[n]) if n in old else None
        c = cv([float(p) for p in pk])
        losses = [r["loss_rate_at_answer"] for r in rs if r.get("loss_rate_at_answer") is not None]
        fids = [r["fidelity"] for r in rs if r.get("fidelity", {}).get("available")]
        gt10 = [f["frac_gt10"] for f in fids]
        # Results written before the lag was traced have no lag keys: left out, not read as 0.
        lag99 = [f["lag_p99_frames"] for f in fids if f.get("lag_p99_frames") is not None]
        rows.append(
            {
                "flows": n,
                "runs": len(rs),
                "valid_runs": sum(bool(r["valid"]) for r in rs),
                # Older results carry no cautions: counted as none.
                "cautioned_runs": sum(bool(r.get("cautions")) for r in rs),
                "median_packets": statistics.median(pk),
                "median_bytes": round(med_bytes),
                "min_packets": min(pk),
                "max_packets": max(pk),
                "cv": round(c, 3) if c is not None else None,
                "theory_packets": theory_pk,
                "ratio_to_theory": round(statistics.median(pk) / theory_pk, 2),
                "bdp_packets": rs[0]["bdp_packets"],
                **(cc_rule_cells(rule, rs[0]["bdp_packets"], n, statistics.median(pk)) if rule else {}),
                "hardware_median_bytes": round(hw_med) if hw_med is not None else None,
                "hardware_runs": len(hw.get(n, [])),
                "ratio_to_hardware": round(med_bytes / hw_med, 2) if hw_med else None,
                "mininet2012_median_bytes": round(old_med) if old_med is not None else None,
                "ratio_to_mininet2012": round(med_bytes / old_med, 2) if old_med else None,
                "loss_at_answer_median": round(statistics.median(losses), 5) if losses else None,
                "pacing_gt10_median": round(statistics.median(gt10), 4) if gt10 else None,
                "pacing_lag_p99_median": round(statistics.median(lag99), 2) if lag99 else None,
                "cc": ",".join(sorted({r["cc"] for r in rs})),
                "mean_wall_seconds": round(statistics.mean(r["wall_seconds"] for r in rs)),
            }
        )
    return rows


def sim_medians(sim: list[dict]) -> dict[int, float]:
    """The twin's median answer per N (buffersizing/sim/), for `bufsize plot --with-sim`."""
    by_n: dict[int, list[int]] = {}
    for r in sim:
        by_n.setdefault(r["flows"], []).append(r["buffer_packets"])
    return {n: statistics.median(v) for n, v in by_n.items()}


def add_sim_cells(rows: list[dict], sim: list[dict]) -> None:
    """Each row gains the twin's median at its N and emulation / simulation (None where the twin has no N)."""
    med = sim_medians(sim)
    for row in rows:
        m = med.get(row["flows"])
        row["sim_median_packets"] = m
        row["ratio_to_sim"] = round(row["median_packets"] / m, 2) if m else None


# Colour and marker of each --beside sweep in the figure.
BESIDE_STYLES = (("tab:purple", "s"), ("tab:brown", "v"), ("tab:olive", "P"))


def beside_label(ours: dict, other: dict) -> str:
    """What sets another sweep apart from ours (from a result of each), for its legend and columns:
    the settings that differ, 'other sweep' if none do."""
    oc, cc = other.get("config") or {}, ours.get("config") or {}
    parts = [
        other["cc"] if other["cc"] != ours["cc"] else "",
        rtt_words(other) if rtt_words(other) != rtt_words(ours) else "",
        f"{other['nominal_rate_mbps']:g} Mb/s" if other["nominal_rate_mbps"] != ours["nominal_rate_mbps"] else "",
        f"{percent(other['target'])} target" if other["target"] != ours["target"] else "",
        f"shaper {oc.get('shaper')}" if oc.get("shaper") != cc.get("shaper") else "",
    ]
    return ", ".join(p for p in parts if p) or "other sweep"


def add_beside_cells(rows: list[dict], other: list[dict], i: int = 1) -> None:
    """Each row gains the i-th other emulated sweep's median and range at its N and ours / theirs (None
    where it has no such N): `bufsize plot --beside`, e.g. BBR beside cubic, spread beside equal RTTs."""
    theirs = {r["flows"]: r for r in summary_rows(other)}
    for row in rows:
        t = theirs.get(row["flows"], {})
        for k in ("median_packets", "min_packets", "max_packets"):
            row[f"beside{i}_{k}"] = t.get(k)
        m = t.get("median_packets")
        row[f"ratio_to_beside{i}"] = round(row["median_packets"] / m, 2) if m else None


def cc_rule_cells(rule: CcRule, bdp_packets: float, flows: int, median_packets: float) -> dict:
    packets = round(rule.packets(bdp_packets, flows), 1)
    return {"cc_rule_packets": packets, "ratio_to_cc_rule": round(median_packets / packets, 2)}


def runs_cell(row: dict) -> str:
    """Runs, valid runs and, where any run carries a caution (scaffold/cautions.py), how many: "5 (5)",
    "5 (4; 2 cautioned)". A row without the count (a table read from before it existed) has none."""
    cautioned = row.get("cautioned_runs") or 0
    return f"{row['runs']} ({row['valid_runs']}{f'; {cautioned} cautioned' if cautioned else ''})"


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def write_table(
    rows: list[dict], out: Path, beside: Sequence[str] = (), caution_checks: set[str] | None = None
) -> tuple[Path, Path]:
    """table.csv (every key of the rows) and table.md (the columns below); `beside` labels the columns
    of other sweeps' answers, in add_beside_cells' order; `caution_checks` name the cautions the
    note under the table speaks of (default: the hypervisor's steal)."""
    csv_path, md_path = out / "table.csv", out / "table.md"
    with atomic_text(csv_path) as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    cols = [
        ("flows", "N"),
        ("runs", "runs (valid)"),
        ("median_packets", "ours: median pkts"),
        ("min_packets", "min..max"),
        ("cv", "CV"),
        ("theory_packets", "RTT*C/sqrt(N) pkts"),
        ("ratio_to_theory", "ours/theory"),
        *(
            [("cc_rule_packets", f"{rows[0]['cc']} rule pkts"), ("ratio_to_cc_rule", f"ours/{rows[0]['cc']} rule")]
            if "cc_rule_packets" in rows[0]
            else []
        ),
        *(
            [("sim_median_packets", "ns-3 twin median pkts"), ("ratio_to_sim", "emulation/twin")]
            if "sim_median_packets" in rows[0]
            else []
        ),
        *(
            col
            for i, label in enumerate(beside, 1)
            for col in (
                (f"beside{i}_median_packets", f"{label}: median pkts"),
                (f"beside{i}_min_packets", f"{label}: min..max"),
                (f"ratio_to_beside{i}", f"ours/{label}"),
            )
        ),
        ("median_bytes", "ours bytes"),
        ("hardware_median_bytes", "hardware median bytes"),
        ("ratio_to_hardware", "ours/hw"),
        ("mininet2012_median_bytes", "2012 median bytes"),
        ("ratio_to_mininet2012", "ours/2012"),
        ("loss_at_answer_median", "loss at answer (median)"),
        ("pacing_gt10_median", "gaps >10 % off (median)"),
        ("pacing_lag_p99_median", "lag p99, frames (median)"),
    ]
    lines = ["| " + " | ".join(h for _, h in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = []
        for k, _ in cols:
            if k == "runs":
                cells.append(runs_cell(r))
            elif k.endswith("min_packets"):
                lo, hi = r[k], r[k.replace("min", "max")]
                cells.append("-" if lo is None else f"{lo}..{hi}")
            else:
                cells.append(_fmt(r[k]))
        lines.append("| " + " | ".join(cells) + " |")
    if any(r.get("cautioned_runs") for r in rows):
        lines += ["", table_note(checks=caution_checks)]
    write_atomic(md_path, "\n".join(lines) + "\n")
    return csv_path, md_path


def plot(
    results: list[dict],
    out: Path,
    title: str,
    ref_dir: Path = REFERENCE_DIR,
    sim: list[dict] | None = None,
    beside: Sequence[tuple[str, list[dict]]] = (),
) -> list[Path]:
    import matplotlib.pyplot as plt

    fig = sweep_figure(results, title, ref_dir, sim, beside)
    paths = [out / "figure.png", out / "figure.pdf"]
    save_figure(fig, paths[0], dpi=130)
    save_figure(fig, paths[1])
    plt.close(fig)
    return paths


def sweep_figure(
    results: list[dict],
    title: str,
    ref_dir: Path = REFERENCE_DIR,
    sim: list[dict] | None = None,
    beside: Sequence[tuple[str, list[dict]]] = (),
):  # noqa: ANN201 (a matplotlib Figure; matplotlib is imported only when a figure is drawn)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 7))
    draw_theory(ax, results)
    draw_published(ax, results, ref_dir)
    draw_ours(ax, results, summary_rows(results, ref_dir))
    draw_others(ax, sim, beside, ref_dir)
    finish_axes(ax, title, [*results, *(r for _, o in beside for r in o)])
    fig.tight_layout()
    return fig


def draw_theory(ax, results: list[dict]) -> None:  # noqa: ANN001 (matplotlib Axes)
    """RTT*C/sqrt(N), RTT*C, and the congestion control's own rule where it has one."""
    first = results[0]
    bdp_bytes = first["nominal_rate_mbps"] * 1e6 / 8 * first["rtt_ms_for_theory"] / 1000
    xs = [1, 1000]
    grid = [10 ** (i / 20) for i in range(0, 61)]
    ax.plot(grid, [bdp_bytes / math.sqrt(n) for n in grid], "k-", lw=1.2, label="RTT*C/sqrt(N)")
    ax.plot(xs, [bdp_bytes, bdp_bytes], "k--", lw=1, label="RTT*C (rule of thumb)")
    rule = sweep_rule(results)
    if rule is not None:  # its n-flow form (the sweep's N start at 2)
        ax.plot(grid, [rule.many_flows_factor * bdp_bytes / math.sqrt(n) for n in grid], "k:", lw=1.4,
                label=rule.label())  # fmt: skip


def draw_published(ax, results: list[dict], ref_dir: Path) -> None:  # noqa: ANN001 (matplotlib Axes)
    """The hardware runs and the 2012 emulation's, where the sweep's link is theirs (else a note)."""
    hw, old = published_runs(results, ref_dir)
    if hw:
        hx = [n for n in hw for _ in hw[n]]
        ax.scatter(hx, [b for n in hw for b in hw[n]], marker="x", s=18, color="0.6", label="hardware (NetFPGA) runs")
        hn = sorted(hw)
        ax.plot(hn, [statistics.median(hw[n]) for n in hn], "s-", color="0.35", ms=5, label="hardware median")
    else:
        ax.text(0.99, 0.99, f"hardware and 2012 data ({PUBLISHED_RATE_MBPS:g} Mb/s, every RTT {PUBLISHED_RTT_MS:g} ms)"
                "\nnot drawn: this sweep's setting differs", transform=ax.transAxes, ha="right", va="top",
                fontsize=7.5, color="0.35")  # fmt: skip
    if old:
        on = sorted(old)
        ax.scatter([n for n in on for _ in old[n]], [b for n in on for b in old[n]], marker="^", s=16,
                   color="tab:orange")  # fmt: skip
        ax.plot(on, [statistics.median(old[n]) for n in on], "^--", color="tab:orange", ms=5, lw=1,
                label="Mininet-HiFi 2012 (98% target, BIC)")  # fmt: skip


# Markers of flagged runs, one per failed check that a figure names (the first failed, in the result's order).
FLAG_MARKERS = ("X", "P", "*", "h", "d", "v")


def first_failed_flag(r: dict) -> str:
    """The first check a flagged run failed, as its result names it ('invalid' where it names none)."""
    return next((k for k, v in (r.get("flags") or {}).items() if v is False), "invalid")


def spread_x(results: list[dict]) -> dict[int, float]:
    """An x position per run: the runs at one N side by side (a few percent apart on the log axis), so
    that their interval bars do not hide each other."""
    by_n: dict[int, list[int]] = {}
    for i, r in enumerate(results):
        by_n.setdefault(r["flows"], []).append(i)
    return {i: n * 1.05 ** (k - (len(ix) - 1) / 2) for n, ix in by_n.items() for k, i in enumerate(ix)}


def interval_bars(runs: list[dict]) -> list[list[float]] | None:
    """Matplotlib's yerr (below, above) from each run's uncertain interval in packets; None where any
    run has none (results written before the interval was recorded)."""
    if not all(r.get("uncertain_interval_packets") for r in runs):
        return None
    lo = [max(0.0, r["buffer_bytes"] - r["uncertain_interval_packets"][0] * FRAME_BYTES) for r in runs]
    hi = [max(0.0, r["uncertain_interval_packets"][1] * FRAME_BYTES - r["buffer_bytes"]) for r in runs]
    return [lo, hi]


def valid_medians(results: list[dict]) -> tuple[list[int], list[float]]:
    """The median answer in bytes of the valid runs at each N that has any: flagged runs stay out."""
    by_n: dict[int, list[float]] = {}
    for r in results:
        if r["valid"]:
            by_n.setdefault(r["flows"], []).append(r["buffer_packets"] * FRAME_BYTES)
    ns = sorted(by_n)
    return ns, [statistics.median(by_n[n]) for n in ns]


def draw_ours(ax, results: list[dict], rows: list[dict]) -> None:  # noqa: ANN001 (matplotlib Axes)
    """This sweep's runs with their intervals as bars, its flagged runs apart (a marker per failed check,
    named in the legend), and the median line of its valid runs."""
    first = results[0]
    who = "ns-3 twin" if first.get("kind") == "sim-search" else "this testbed"
    xs = spread_x(results)
    ok = [i for i, r in enumerate(results) if r["valid"]]
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(results):
        if not r["valid"]:
            groups.setdefault(first_failed_flag(r), []).append(i)
    if ok:
        runs = [results[i] for i in ok]
        ax.errorbar([xs[i] for i in ok], [r["buffer_bytes"] for r in runs], yerr=interval_bars(runs), fmt="o",
                    ms=4, color="tab:blue", alpha=0.6, elinewidth=0.8, capsize=2,
                    label=f"{who}: valid runs, bar = the search's interval")  # fmt: skip
    for (flag, ix), marker in zip(sorted(groups.items()), FLAG_MARKERS * 4, strict=False):
        runs = [results[i] for i in ix]
        ax.errorbar([xs[i] for i in ix], [r["buffer_bytes"] for r in runs], yerr=interval_bars(runs), fmt=marker,
                    ms=6, color="tab:red", alpha=0.7, elinewidth=0.8, capsize=2,
                    label=f"flagged (failed: {flag}), not in the median")  # fmt: skip
    ns, med = valid_medians(results)
    if ns:
        what = f"{percent(first['target'])} target, {rows[0]['cc']}"
        ax.plot(ns, med, "o-", color="tab:blue", ms=7, lw=2, label=f"{who}: median of valid runs ({what})")


def draw_others(ax, sim: list[dict] | None, beside: Sequence[tuple[str, list[dict]]], ref_dir: Path) -> None:  # noqa: ANN001
    """The twin's runs and median (--with-sim), and each --beside sweep's."""
    if sim:
        med = sim_medians(sim)
        ns = sorted(med)
        ax.scatter([r["flows"] for r in sim], [r["buffer_bytes"] for r in sim], s=14, marker="D", color="tab:green",
                   alpha=0.5)  # fmt: skip
        version = sim[0].get("manifest", {}).get("ns3_version", "")
        ax.plot(ns, [med[n] * FRAME_BYTES for n in ns], "D-", color="tab:green", ms=5, lw=1.5,
                label=f"ns-3 {version} twin: median ({len({r.get('seed') for r in sim})} seeds)")  # fmt: skip
    for (label, other), (color, marker) in zip(beside, BESIDE_STYLES, strict=False):
        med = summary_rows(other, ref_dir)
        ax.scatter([r["flows"] for r in other], [r["buffer_bytes"] for r in other], s=14, marker=marker,
                   color=color, alpha=0.45)  # fmt: skip
        ax.plot([r["flows"] for r in med], [r["median_bytes"] for r in med], f"{marker}--", color=color, ms=5,
                lw=1.5, label=f"this testbed, {label}: median")  # fmt: skip


def finish_axes(ax, title: str, drawn: list[dict]) -> None:  # noqa: ANN001 (matplotlib Axes)
    """Log axes down to the smallest answer drawn, packets on the right, the legend below the axes."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(bottom=min(1000, *(r["buffer_bytes"] * 0.8 for r in drawn)))
    ax.secondary_yaxis("right", functions=(lambda b: b / FRAME_BYTES, lambda p: p * FRAME_BYTES)).set_ylabel(
        f"packets of {FRAME_BYTES} bytes"
    )
    ax.set_xlim(1.5, 1000)
    ax.set_xlabel("number of long-lived TCP flows N")
    ax.set_ylabel("minimum buffer for target utilization (bytes)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    # Below the axes, not inside: small answers (BBR's 4 packets at N = 2-10) sit at the lower left,
    # where an inside legend hid them.
    ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)


def make_report(
    d: Path,
    title: str | None = None,
    with_sim: Path | None = None,
    beside_dirs: Sequence[Path] = (),
    dest: Path | None = None,
    curve_flows: Sequence[int] | None = None,
) -> list[Path]:
    """A sweep's figure, table and curves (longlived/curves.py, one line per N of `curve_flows`,
    default every N), from its results, written into `dest` (default: the sweep)."""
    results = load_results(d)
    sim = load_results(with_sim) if with_sim is not None else None
    if sim is not None and any(r.get("kind") != "sim-search" for r in sim):
        raise UsageError(f"--with-sim {with_sim}: not a twin sweep (bufsize sweep --link simulated writes one)")
    if len(beside_dirs) > len(BESIDE_STYLES):
        raise UsageError(f"--beside: at most {len(BESIDE_STYLES)} other sweeps (a figure stays readable)")
    beside = [load_results(b) for b in beside_dirs]
    for b, other in zip(beside_dirs, beside, strict=True):
        if any(r.get("kind") == "sim-search" for r in other):
            raise UsageError(f"--beside {b}: a twin sweep (it goes with --with-sim)")
    first = results[0]
    if first.get("kind") == "sim-search":  # the ns-3 twin (buffersizing/sim/)
        method = f"ns-3 {first['manifest']['ns3_version']} twin"
    else:
        # auto may choose differently by N
        names = dict.fromkeys(r["config"]["shaper"] for r in results)
        shapers = " or ".join(SHAPER_WORDS.get(n, n) for n in names)
        delay = DELAY_WORDS.get(first["delay_backend"], first["delay_backend"])
        method = f"emulated: {shapers}, {delay}"
        c = first.get("config", {})
        changes = tcp_changes(c.get("loss_recovery", "linux"), c.get("delayed_ack", True),
                              c.get("sender_pacing", False))  # fmt: skip
        method += "".join(f", {t}" for t in changes)
    title = title or (
        f"Minimum buffer for {percent(first['target'])} utilization\n{first['nominal_rate_mbps']:g} Mb/s, "
        f"{rtt_words(first)}, cc {first['cc']}, {method}"
    )
    rows = summary_rows(results)
    if sim is not None:
        add_sim_cells(rows, sim)
    for i, other in enumerate(beside, 1):
        add_beside_cells(rows, other, i)
    labels = [beside_label(first, other[0]) for other in beside]
    # Two sweeps that differ from ours in the same way (or not at all) are told apart by directory.
    labels = [f"{lb} ({b.name})" if labels.count(lb) > 1 else lb for lb, b in zip(labels, beside_dirs, strict=True)]
    figure = plot(results, dest or d, title, sim=sim, beside=list(zip(labels, beside, strict=True)))
    panels = [(method, results)] + ([(f"ns-3 {sim[0]['manifest']['ns3_version']} twin", sim)] if sim else [])
    heading = f"Utilization against buffer\n{first['nominal_rate_mbps']:g} Mb/s, {rtt_words(first)}, cc {first['cc']}"
    curves = plot_curves(panels, dest or d, heading, curve_flows)
    checks = {c.get("check") for r in results for c in r.get("cautions") or []}
    return [*figure, *write_table(rows, dest or d, labels, checks), *curves]


# The words a figure's title uses for the link's parts (the configuration's names are the options').
SHAPER_WORDS = {"line": "line shaper", "htb": "HTB + bfifo", "auto": "shaper chosen per N"}
DELAY_WORDS = {"delayline": "userspace delay line", "netem": "netem delay"}


def percent(target: float) -> str:
    """99 %, 99.5 % and 99.9 % as '99%', '99.5%', '99.9%' (fig11's targets would all read 100% at .0%)."""
    return f"{target * 100:.1f}".removesuffix(".0") + "%"


def rtt_words(r: dict) -> str:
    """'RTT 87 ms', or for spread RTTs 'RTT 47..127 ms (mean 87)'."""
    rtts = (r.get("config") or {}).get("rtt_ms") or [r["rtt_ms_for_theory"]]
    if min(rtts) == max(rtts):
        return f"RTT {rtts[0]:g} ms"
    return f"RTT {min(rtts):g}..{max(rtts):g} ms (mean {r['rtt_ms_for_theory']:g})"
