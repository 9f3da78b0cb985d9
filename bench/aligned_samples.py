"""Samples cut at loss episodes against samples of a fixed length (issue 30), from recorded queue traces.

A sample of fixed length holds a random share of the flows' sawtooth: it may or may not hold a loss
dip, and that is most of its spread where the flows are few. A sample that starts at a loss episode
and ends at a later one holds whole cycles. This re-cuts the queue traces (100 Hz: bytes sent, drops,
buffer limit) the committed searches recorded, over the buffers within 0.7-1.4 x each search's answer
(after each probe's settle), three ways:
- `fixed`: back-to-back samples of two episode intervals (at least 20 RTTs) from the end of the
  settle, what a search takes today (`--sample-length measured`);
- `aligned k`: from the first episode start after the settle, samples from one episode start to the
  k-th next (k = 1, 2; shorter than 20 RTTs is allowed here, to see the effect alone).
Per point: the within-buffer SD of one sample's utilization (of the nominal rate), SD^2 x the mean
sample length (x 1e5: what a second of sampling is worth, lower is better), the median of a buffer's
samples less the stretch's time average (the bias a median-filtered search reads), and `wait`, the
mean time from the settle's end to the first episode start (what an aligned sample costs before it
starts). Episodes as `dynamics.loss_cycle` counts them (a 2-RTT bin holding a drop after one
without). No traffic: it reads files.

    .venv/bin/python bench/aligned_samples.py results/full/2026-11-27 results/theory/2026-11-25 --max-flows 20
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from sample_length_recut import recut, segments

from bufsize.longlived.dynamics import episode_starts


def aligned(t: list[float], sent: list[int], starts: list[int], k: int, rate_bps: float) -> list[tuple[float, float]]:
    """(utilization, length) of samples from one episode start to the k-th next, back to back."""
    out = []
    for a in range(0, len(starts) - k, k):
        i, j = starts[a], starts[a + k]
        out.append(((sent[j] - sent[i]) * 8 / (t[j] - t[i]) / rate_bps, t[j] - t[i]))
    return out


class Pool:
    """Within-buffer spread pooled over a search's buffers, and the median's bias per buffer."""

    def __init__(self) -> None:
        self.ss = 0.0
        self.dof = 0
        self.lengths: list[float] = []
        self.bias: list[float] = []

    def add(self, samples: list[tuple[float, float]], time_average: float) -> None:
        if len(samples) < 2:
            return
        us = [u for u, _ in samples]
        m = statistics.fmean(us)
        self.ss += sum((u - m) ** 2 for u in us)
        self.dof += len(us) - 1
        self.lengths += [s for _, s in samples]
        self.bias.append(statistics.median(us) - time_average)

    def row(self) -> dict | None:
        if not self.dof:
            return None
        var = self.ss / self.dof
        length = statistics.fmean(self.lengths)
        return {"sd": var**0.5, "var_x_s": var * length * 1e5, "length_s": length, "samples": len(self.lengths),
                "bias": statistics.median(self.bias)}  # fmt: skip


def analyse(point: Path) -> dict | None:
    res = json.loads((point / "result.json").read_text())
    cfg = res["config"]
    rtt_s = max(cfg["rtt_ms"]) / 1000
    rate = cfg["rate_mbps"] * 1e6
    answer = res["buffer_packets"]
    if not answer:
        return None
    settle = max((m["settle_s"] for m in res["measurements"]), default=0.0)
    floor = max(1.0, 20 * rtt_s)
    pools = {"fixed": Pool(), "aligned 1": Pool(), "aligned 2": Pool()}
    waits, intervals = [], []
    for b, t, sent, drops in segments(point / "queue.csv")[1:]:  # the first is calibration
        k0 = next((i for i, x in enumerate(t) if x - t[0] >= settle), len(t))
        t, sent, drops = t[k0:], sent[k0:], drops[k0:]
        if not (0.7 * answer <= b <= 1.4 * answer) or len(t) < 3:
            continue
        starts = episode_starts(t, drops, 2 * rtt_s)
        if len(starts) < 3:
            continue
        interval = (t[starts[-1]] - t[starts[0]]) / (len(starts) - 1)
        intervals.append(interval)
        waits.append(t[starts[0]] - t[0])
        average = (sent[-1] - sent[0]) * 8 / (t[-1] - t[0]) / rate
        length = max(floor, 2 * interval)
        pools["fixed"].add([(u, length) for u in recut(t, sent, length, rate)], average)
        for k in (1, 2):
            pools[f"aligned {k}"].add(aligned(t, sent, starts, k, rate), average)
    rows = {name: p.row() for name, p in pools.items()}
    if not intervals or any(r is None for r in rows.values()):
        return None
    return {"point": str(point), "flows": res["options"].get("flows", cfg.get("flows")), "answer": answer,
            "interval_s": statistics.median(intervals), "wait_s": statistics.fmean(waits), **rows}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweeps", nargs="+", type=Path, help="sweep directories whose points kept queue.csv")
    ap.add_argument("--max-flows", type=int, default=20, help="only points with at most this many flows (20)")
    args = ap.parse_args()
    rows = []
    for sweep in args.sweeps:
        for point in sorted(sweep.glob("n*-run*")):
            if (point / "queue.csv").exists() and (point / "result.json").exists():
                res = json.loads((point / "result.json").read_text())
                if res["options"].get("flows", 0) <= args.max_flows:
                    r = analyse(point)
                    if r:
                        rows.append(r)
    names = ("fixed", "aligned 1", "aligned 2")
    heads = [f"{n}: length (s), SD, var x s, median bias" for n in names]
    print("| point | N | answer | episode interval (s) | wait (s) | " + " | ".join(heads)
          + " | aligned 1 / fixed, aligned 2 / fixed (var x s) |")  # fmt: skip
    print("| --- " * 9 + "|")
    for r in rows:
        cells = [f"{r[n]['length_s']:.1f}, {r[n]['sd']:.4f}, {r[n]['var_x_s']:.1f}, {r[n]['bias']:+.4f}" for n in names]
        ratios = ", ".join(f"{r[n]['var_x_s'] / r['fixed']['var_x_s']:.2f}" for n in names[1:])
        print(f"| {r['point']} | {r['flows']} | {r['answer']} | {r['interval_s']:.2f} | {r['wait_s']:.1f} | "
              + " | ".join(cells) + f" | {ratios} |")  # fmt: skip
    print("\nPer N, median [range] over its searches of var x s against fixed samples:\n")
    print("| sweep | N | searches | aligned 1 / fixed | aligned 2 / fixed | wait (s) |")
    print("| --- | --- | --- | --- | --- | --- |")
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        groups.setdefault((str(Path(r["point"]).parent), r["flows"]), []).append(r)
    for (sweep, n), rs in groups.items():
        cols = []
        for name in names[1:]:
            v = sorted(r[name]["var_x_s"] / r["fixed"]["var_x_s"] for r in rs)
            cols.append(f"{statistics.median(v):.2f} [{v[0]:.2f}..{v[-1]:.2f}]")
        w = sorted(r["wait_s"] for r in rs)
        print(f"| {sweep} | {n} | {len(rs)} | " + " | ".join(cols) + f" | {statistics.median(w):.1f} |")


if __name__ == "__main__":
    main()
