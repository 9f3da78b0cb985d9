"""Appenzeller 2004's Fig 15 on the emulator: utilization at fixed buffers of 0.5-3 x RTT*C/sqrt(n), n = 100-400.

The router experiment ran a Cisco GSR's OC3 (155 Mb/s) port with a BDP of 1291 packets (RTT about
100 ms). Here each n gets one dumbbell of min(n, 400) hosts whose RTTs are spread evenly over a
range around 100 ms (so flows desynchronize), and `fixedbuffer.run_measure` measures every buffer
of that row in turn. Buffers are the published packet counts (multiple x 1291/sqrt(n), the 1x value
truncated first), held as 1514-byte frames. The table sets the F7 bound, this emulator, and the
published model, ns-2 and router columns side by side.
"""

from __future__ import annotations

import csv
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from bufsize.longlived.measure import MeasureOptions, run_measure
from bufsize.longlived.report import REFERENCE_DIR, read_tsv
from bufsize.scaffold.experiment import Say
from bufsize.scaffold.link import LinkSpec
from bufsize.scaffold.resultdir import check_out_dir, read_finished, write_json_atomic
from bufsize.scaffold.runs import Emulated
from bufsize.theory import model
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.config import MAX_HOSTS, DumbbellConfig
from bufsize.topologies.errors import UsageError
from bufsize.topologies.safefiles import atomic_text, save_figure, write_atomic
from bufsize.topologies.units import check_buffer_bytes
from bufsize.traffic.longflows import MAX_FLOWS

GSR_TSV = "gsr-oc3-utilization-table.tsv"
PUBLISHED_BDP = 1291


def published(ref_dir: Path = REFERENCE_DIR) -> dict[tuple[int, float], dict[str, float]]:
    return {
        (int(r["flows"]), float(r["multiple"])): {k: float(v) for k, v in r.items() if k not in ("flows", "multiple")}
        for r in read_tsv(ref_dir / GSR_TSV)
    }


def buffer_packets(flows: int, multiple: float, bdp: float = PUBLISHED_BDP) -> int:
    """As the table counts them: the 1x size truncated first (1291/sqrt(300) = 74.5 is listed as 74,
    1291/sqrt(400) = 64.55 as 64), then halves rounded to even (0.5 x 129 = 64, 0.5 x 91 = 46)."""
    return round(multiple * int(bdp / math.sqrt(flows)))


MAX_MULTIPLE = 1000.0  # 1000 x 1291/sqrt(n) packets is far beyond any buffer the table studies


def check_table(flows: list[int], multiples: list[float], max_hosts: int) -> None:
    """The table's rows (n) and columns (multiples), before anything is built."""
    for n in flows:
        if not 1 <= n <= MAX_FLOWS:
            raise UsageError(f"--flows {n}: must be from 1 to {MAX_FLOWS}")
    if len(set(flows)) != len(flows):
        raise UsageError(f"--flows {','.join(map(str, flows))}: a number of flows is listed twice")
    if len(set(multiples)) != len(multiples):
        raise UsageError(f"--multiples {','.join(f'{m:g}' for m in multiples)}: a multiple is listed twice")
    if not 1 <= max_hosts <= MAX_HOSTS:
        raise UsageError(f"--hosts {max_hosts}: must be from 1 to {MAX_HOSTS}")
    for n in flows:
        for m in multiples:
            # Each buffer is a whole number of packets: a small multiple at large n rounds to none.
            if buffer_packets(n, m) < 1:
                raise UsageError(
                    f"--multiples {m:g} with --flows {n}: {m:g} x {int(PUBLISHED_BDP / math.sqrt(n))} packets "
                    "rounds to no buffer at all"
                )
            check_buffer_bytes(buffer_packets(n, m) * FRAME_BYTES, f"--multiples {m:g} with --flows {n}: buffer")


def point_dir(out: Path, flows: int) -> Path:
    return out / f"n{flows:04d}"


def rows(out: Path, ref_dir: Path = REFERENCE_DIR) -> list[dict]:
    pub = published(ref_dir)
    table = []
    for f in sorted(out.glob("n*/result.json")):
        res = json.loads(f.read_text())
        n = res["flows"]
        for p in res["points"]:
            b = p["buffer_packets"]
            mult = next((m for (fl, m), v in pub.items() if fl == n and v["buffer_packets"] == round(b)), None)
            ref = pub.get((n, mult), {}) if mult is not None else {}
            bound = model.utilization_lower_bound(b, PUBLISHED_BDP, n)
            table.append(
                {
                    "flows": n,
                    "multiple": mult,
                    "buffer_packets": b,
                    "model_bound_pct": round(100 * bound, 2),
                    "emulator_pct": round(100 * p["utilization"], 2),
                    "emulator_min_sample_pct": round(100 * p["utilization_samples"]["min"], 1),
                    "loss_pct": round(100 * p["loss_rate"], 3),
                    "queue_mean_packets": p["queue"].get("mean_packets"),
                    "queue_empty_pct": round(100 * p["queue"].get("empty_fraction", 0), 1),
                    "published_model_pct": ref.get("model_pct"),
                    "published_ns2_pct": ref.get("sim_pct"),
                    "router_pct": ref.get("exp_pct"),
                    "reference_rate_pct": round(100 * res["reference_rate_mbps"] / res["nominal_rate_mbps"], 2)
                    if res.get("reference_rate_mbps")
                    else None,
                    "valid": res["valid"],
                }
            )
    if not table:
        raise UsageError(f"{out}: no n*/result.json (run `bufsize util-table --out {out}` first)")
    return table


COLUMNS = [
    ("flows", "n"),
    ("multiple", "x RTT*C/sqrt(n)"),
    ("buffer_packets", "buffer (pkts)"),
    ("model_bound_pct", "F7 bound %"),
    ("emulator_pct", "emulator %"),
    ("emulator_min_sample_pct", "worst 1 s %"),
    ("loss_pct", "loss %"),
    ("queue_mean_packets", "mean queue"),
    ("queue_empty_pct", "queue empty %"),
    ("published_model_pct", "published model %"),
    ("published_ns2_pct", "ns-2 %"),
    ("router_pct", "GSR router %"),
    ("reference_rate_pct", "emulator at 2 BDP %"),
    ("valid", "valid"),
]


def write_table(table: list[dict], out: Path, where: str = "this emulator") -> tuple[Path, Path]:
    md, cv = out / "table.md", out / "table.csv"
    with atomic_text(cv) as f:
        w = csv.DictWriter(f, fieldnames=[k for k, _ in COLUMNS])
        w.writeheader()
        w.writerows({k: r[k] for k, _ in COLUMNS} for r in table)
    lines = ["| " + " | ".join(h for _, h in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in table:
        lines.append("| " + " | ".join("" if r[k] is None else str(r[k]) for k, _ in COLUMNS) + " |")
    write_atomic(
        md,
        f"# Utilization at fixed buffers (Appenzeller 2004 Fig 15) on {where}\n\n"
        "F7 bound: erf(3*sqrt(3)/(2*sqrt(2)) * B / ((BDP + B)/sqrt(n))) with BDP 1291. Published columns: "
        "results/reference/gsr-oc3-utilization-table.tsv. Emulator utilization is of the nominal rate C over "
        "the whole measurement; 'worst 1 s' is its lowest one-second sample.\n\n" + "\n".join(lines) + "\n",
    )
    return md, cv


def plot(table: list[dict], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for i, n in enumerate(sorted({r["flows"] for r in table})):
        color = f"C{i}"
        rs = sorted((r for r in table if r["flows"] == n), key=lambda r: r["buffer_packets"])
        xs = [r["buffer_packets"] for r in rs]
        ax.plot(xs, [r["emulator_pct"] for r in rs], "o-", color=color, label=f"n={n} emulator")
        ax.plot(xs, [r["router_pct"] for r in rs], "s", mfc="none", color=color, label=f"n={n} GSR router")
        grid = [xs[0] * 0.8 + k * (xs[-1] * 1.1 - xs[0] * 0.8) / 100 for k in range(101)]
        ax.plot(
            grid,
            [100 * model.utilization_lower_bound(b, PUBLISHED_BDP, n) for b in grid],
            ":",
            color=color,
            lw=1,
            label=f"n={n} F7 bound",
        )
    ax.set_xscale("log")
    ax.set_ylim(90, 100.5)
    ax.set_xlabel(f"buffer (packets of {FRAME_BYTES} B)")
    ax.set_ylabel("link utilization (%)")
    ax.set_title("Utilization against buffer, 155 Mb/s, BDP 1291 packets (Appenzeller 2004 Fig 15)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path = out / "utilization.png"
    save_figure(fig, path, dpi=120)
    plt.close(fig)
    return path


def report(out: Path) -> list[Path]:
    table = rows(out)
    twin = any((read_finished(f) or {}).get("kind") == "sim-measure" for f in out.glob("n*/result.json"))
    return [*write_table(table, out, "the ns-3 twin" if twin else "this emulator"), plot(table, out)]


# (n, the buffers in bytes, the row's directory): measures them all on one link and writes result.json
MeasureRow = Callable[[int, list[int], Path], object]


def emulated_rows(
    config_for: Callable[[int], DumbbellConfig], opts_for: Callable[[int], MeasureOptions], backend: str, say: Say
) -> MeasureRow:
    return lambda n, buffers, d: run_measure(config_for(n), Emulated(backend, d, say), buffers, opts_for(n))


def run_util_table(
    out: Path,
    flows: list[int],
    multiples: list[float],
    max_hosts: int,
    config_for: Callable[[int], LinkSpec],
    opts_for: Callable[[int], MeasureOptions],
    measure: MeasureRow,
    say: Say,
) -> list[Path]:
    """One fixed-buffer measurement per n (all its buffers on one link, emulated or the twin), resumable
    per n; `config_for(n)` is the link `measure` builds for row n, recorded in spec.json."""
    settings = {
        "flows": flows,
        "multiples": multiples,
        "max_hosts": max_hosts,
        "configs": {str(n): config_for(n).to_dict() for n in flows},
        "options": {str(n): asdict(opts_for(n)) for n in flows},
    }
    check_out_dir(out)
    spec_path = out / "spec.json"
    old = read_finished(spec_path)
    if old is not None and old != settings:
        diff = sorted(k for k in settings if old.get(k) != settings[k])
        raise UsageError(
            f"{out} holds a util-table made with other settings ({', '.join(diff)}); "
            "re-run the same command to resume it, or choose another --out"
        )
    if old is None:
        if any(out.glob("n*/result.json")):
            raise UsageError(f"{out} holds util-table rows of unknown settings; choose another --out")
        write_json_atomic(spec_path, settings)
    t0 = time.monotonic()
    for i, n in enumerate(flows, 1):
        d = point_dir(out, n)
        if read_finished(d / "result.json") is not None:
            say(f"[{i}/{len(flows)}] n={n}: done earlier, kept")
            continue
        buffers = [buffer_packets(n, m) * FRAME_BYTES for m in multiples]
        say(f"[{i}/{len(flows)}] n={n} ({time.monotonic() - t0:.0f} s so far)")
        measure(n, buffers, d)
    paths = report(out)
    write_atomic(out / "wall_seconds.txt", f"{time.monotonic() - t0:.0f}\n")
    return paths
