"""Do the low-utilization episodes follow the hypervisor's steal? (issue 33), from recorded searches.

At N >= 200 a probe at one buffer reads 99.5-100 % and the next at the same buffer 92-97 %. Since
2026-11-28 the CPU monitor records each core's steal (time the hypervisor ran something else while
this VM wanted the core) every second. This lines each utilization sample up with it:
- the monitors' clock (`cpu.csv`, `queue.csv`: seconds from the recorder's start) against the
  samples' wall clock (`samples.csv`): a probe that changes the buffer starts a stretch of one limit
  in the queue trace `settle_s` before its samples; the offset most such pairs agree on is used;
- per sample: its utilization less the median of every sample at the same buffer in that search
  (the residual: what the episodes take away, free of the buffer's own effect), the steal of the
  core that steals most over the sample's window (overlap-weighted means of the 1 s rows), and the
  time the bottleneck held frames but sent none in stretches of 20 ms or more (line_stalls.py).
Per search: Spearman's rank correlation of residual and steal, and the residuals of the samples
above and below 2 % steal. No traffic: it reads files (queue.csv is kept beside each search but not
committed; without it a search is skipped).

    .venv/bin/python bench/steal_episodes.py results/theory/2026-11-28/n0200-run2 ...
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections import defaultdict
from pathlib import Path

from line_stalls import stretches
from sample_length_recut import segments

STEAL_HIGH = 0.02  # a sample counts as stolen from above this share of a core


def limit_starts(queue_csv: Path) -> list[tuple[float, int]]:
    """(monitor time, packets) where the buffer limit changes in the queue trace."""
    return [(t[0], b) for b, t, _, _ in segments(queue_csv)]


def clock_offset(samples: list[dict], starts: list[tuple[float, int]]) -> float | None:
    """Wall clock less monitor clock: the candidate most buffer changes agree on within 0.3 s."""
    probes = {
        (float(s["t_start"]) - float(s["settle_s"]), int(s["buffer_packets"]))
        for s in samples
        if float(s["settle_s"]) > 0
    }
    cands = [wall - t for wall, b in probes for t, b2 in starts if b == b2]
    if not cands:
        return None
    best = max(cands, key=lambda c: sum(abs(c - o) < 0.3 for o in cands))
    agree = [o for o in cands if abs(best - o) < 0.3]
    return statistics.median(agree) if len(agree) >= 2 else None


def steal_rows(cpu_csv: Path) -> dict[int, list[tuple[float, float, float]]]:
    """Per core: (start, end, steal share) of each 1 s row."""
    cores: dict[int, list[tuple[float, float, float]]] = defaultdict(list)
    with cpu_csv.open() as f:
        for r in csv.DictReader(f):
            c, t = int(r["core"]), float(r["t_s"])
            prev = cores[c][-1][1] if cores[c] else max(0.0, t - 1.0)
            cores[c].append((prev, t, float(r["steal"])))
    return cores


def window_mean(rows: list[tuple[float, float, float]], a: float, b: float) -> float:
    w = s = 0.0
    for lo, hi, v in rows:
        o = min(hi, b) - max(lo, a)
        if o > 0:
            w += o
            s += o * v
    return s / w if w else float("nan")


def spearman(x: list[float], y: list[float]) -> float:
    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(len(v)), key=v.__getitem__)
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r

    rx, ry = ranks(x), ranks(y)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    den = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return num / den if den else float("nan")


def analyse(point: Path) -> dict | None:
    if not all((point / f).exists() for f in ("result.json", "samples.csv", "cpu.csv", "queue.csv")):
        return None
    with (point / "cpu.csv").open() as f:
        if "steal" not in (csv.DictReader(f).fieldnames or []):
            return None
    res = json.loads((point / "result.json").read_text())
    samples = list(csv.DictReader((point / "samples.csv").open()))
    offset = clock_offset(samples, limit_starts(point / "queue.csv"))
    if offset is None:
        return None
    cores = steal_rows(point / "cpu.csv")
    with (point / "queue.csv").open() as f:
        q = [(float(r["t_s"]), int(r["sent_bytes"]), int(r["backlog_packets"])) for r in csv.DictReader(f)]
    stalled = stretches(q, 0.02)
    by_buffer: dict[int, list[float]] = defaultdict(list)
    for s in samples:
        by_buffer[int(s["buffer_packets"])].append(float(s["util"]))
    rows = []
    for s in samples:
        b = int(s["buffer_packets"])
        if len(by_buffer[b]) < 3:
            continue
        a = float(s["t_start"]) + int(s["sample"]) * float(s["sample_s"]) - offset
        e = a + float(s["sample_s"])
        per_core = [window_mean(cores[c], a, e) for c in sorted(cores)]
        stall = sum(max(0.0, min(t + n, e) - max(t, a)) for t, n in stalled)
        rows.append((float(s["util"]) - statistics.median(by_buffer[b]), max(per_core), stall, per_core))
    if len(rows) < 6:
        return None
    res_ = [r[0] for r in rows]
    hi = [r[0] for r in rows if r[1] > STEAL_HIGH]
    lo = [r[0] for r in rows if r[1] <= STEAL_HIGH]
    worst = sorted(rows)[: max(1, len(rows) // 10)]
    return {
        "point": str(point), "flows": res["flows"], "answer": res["buffer_packets"], "samples": len(rows),
        "offset_s": round(offset, 2), "rho": spearman(res_, [r[1] for r in rows]),
        "rho_core": [spearman(res_, [r[3][c] for r in rows]) for c in range(len(cores))],
        "stolen": len(hi), "resid_stolen": statistics.median(hi) if hi else float("nan"),
        "resid_other": statistics.median(lo) if lo else float("nan"),
        "worst_steal": statistics.median(r[1] for r in worst),
        "all_steal": statistics.median(r[1] for r in rows),
        "stall_s": sum(r[2] for r in rows), "worst_stall_s": sum(r[2] for r in worst),
    }  # fmt: skip


def table(found: list[dict]) -> str:
    lines = [
        "| search | N | answer | samples | rho(residual, steal) | rho per CPU | samples > 2 % steal "
        "| median residual there | elsewhere | steal: worst tenth / all (median) | stalled s: all / worst tenth |",
        "|---" * 11 + "|",
    ]
    for r in found:
        lines.append(
            f"| {r['point']} | {r['flows']} | {r['answer']} | {r['samples']} | {r['rho']:+.2f} "
            f"| {' '.join(f'{x:+.2f}' for x in r['rho_core'])} | {r['stolen']} "
            f"| {r['resid_stolen']:+.4f} | {r['resid_other']:+.4f} | {r['worst_steal']:.3f} / {r['all_steal']:.3f} "
            f"| {r['stall_s']:.2f} / {r['worst_stall_s']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("points", nargs="+", type=Path, help="search directories")
    args = ap.parse_args()
    found = []
    for p in args.points:
        r = analyse(p)
        if r is None:
            print(f"skipped {p}: no steal column, queue trace or enough repeated buffers")
        else:
            found.append(r)
    print(table(found))


if __name__ == "__main__":
    main()
