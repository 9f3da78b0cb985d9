"""How long a utilization sample must be (issue 30, item 4), from queue traces already recorded.

Every search records the bottleneck at 100 Hz (bytes sent, drops, buffer limit: queue.csv). This
re-cuts each buffer's stretch of trace (after its settle) into back-to-back samples of other lengths
and reports, per search and pooled over the buffers within 0.7-1.4 x its answer:
- the loss-episode interval the toolkit measures (dynamics.loss_cycle, bins of two RTTs);
- for each sample length (the one the search used, and 1, 2, 3 episode intervals, at least 20 RTTs
  and here not capped at 30 s): the within-buffer SD of one sample's utilization; how far the median
  of a buffer's samples sits above their mean (a median above the mean reads a buffer as better than
  it is: the bias of bimodal samples); and SD^2 x length (x 1e5), what a second of sampling is worth
  (lower is better; independent samples keep it constant whatever their length).
Utilization here is against the nominal rate. No traffic: it reads files.

    .venv/bin/python bench/sample_length_recut.py results/full/2026-11-25 > bench/results/sample-length.md
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path

from bufsize.longlived.dynamics import LossCycle, loss_cycle
from bufsize.topologies import FRAME_BYTES


def segments(queue_csv: Path) -> list[tuple[int, list[float], list[int], list[int]]]:
    """Contiguous stretches at one buffer limit: (packets, t, sent bytes, drops)."""
    out: list[tuple[int, list[float], list[int], list[int]]] = []
    with queue_csv.open() as f:
        for r in csv.DictReader(f):
            b = int(r["limit_bytes"]) // FRAME_BYTES
            if not out or out[-1][0] != b:
                out.append((b, [], [], []))
            out[-1][1].append(float(r["t_s"]))
            out[-1][2].append(int(r["sent_bytes"]))
            out[-1][3].append(int(r["drops"]))
    return out


def recut(t: list[float], sent: list[int], length_s: float, rate_bps: float) -> list[float]:
    us, j = [], 0
    while True:
        k = j
        while k < len(t) and t[k] - t[j] < length_s:
            k += 1
        if k >= len(t):
            return us
        us.append((sent[k] - sent[j]) * 8 / (t[k] - t[j]) / rate_bps)
        j = k


def analyse(point: Path) -> dict | None:
    res = json.loads((point / "result.json").read_text())
    cfg = res["config"]
    rtt_s = max(cfg["rtt_ms"]) / 1000
    answer = res["buffer_packets"]
    settle = max((m["settle_s"] for m in res["measurements"]), default=0.0)
    used = statistics.median(m["sample_s"] for m in res["measurements"])
    near: list[tuple[list[float], list[int]]] = []
    cycle = LossCycle(0.0, 0, 0)
    for b, t, sent, drops in segments(point / "queue.csv")[1:]:  # the first is calibration
        k = next((i for i, x in enumerate(t) if x - t[0] >= settle), len(t))
        t, sent, drops = t[k:], sent[k:], drops[k:]
        if 0.7 * answer <= b <= 1.4 * answer and len(t) > 2:
            near.append((t, sent))
            cycle = cycle + loss_cycle(t, drops, 2 * rtt_s)
    if not near or cycle.interval_s is None:
        return None
    row = {"flows": cfg.get("flows") or res["options"]["flows"], "answer": answer, "used_s": used,
           "interval_s": cycle.interval_s, "episodes": cycle.episodes, "lossy_bins": cycle.lossy_bins}  # fmt: skip
    floor = max(1.0, 20 * rtt_s)
    for name, length in (("used", used), ("1x", cycle.interval_s), ("2x", 2 * cycle.interval_s),
                         ("3x", 3 * cycle.interval_s)):  # fmt: skip
        length = max(floor, length)
        sds, bias, n = [], [], 0
        for t, sent in near:
            us = recut(t, sent, length, cfg["rate_mbps"] * 1e6)
            if len(us) >= 3:
                sds.append(statistics.stdev(us))
                bias.append(statistics.median(us) - statistics.fmean(us))
                n += len(us)
        sd = statistics.median(sds) if sds else None
        row[name] = {"length_s": round(length, 2), "samples": n, "sd": sd,
                     # what one second of sampling is worth: lower is better (independent samples keep
                     # it constant as the length changes)
                     "var_x_s": sd * sd * length * 1e5 if sd is not None else None,
                     "median_minus_mean": statistics.median(bias) if bias else None}  # fmt: skip
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweeps", nargs="+", type=Path, help="sweep directories whose points kept queue.csv")
    args = ap.parse_args()
    rows = []
    for sweep in args.sweeps:
        for point in sorted(sweep.glob("n*-run*")):
            if (point / "queue.csv").exists() and (point / "result.json").exists():
                r = analyse(point)
                if r:
                    rows.append((str(point), r))
    print("| point | N | answer | sample used (s) | episode interval (s) | episodes / lossy bins |"
          " SD used | SD 1x | SD 2x | SD 3x | median-mean used | 1x | 2x | 3x |"
          " var x s used | 1x | 2x | 3x |")  # fmt: skip
    print("| --- " * 18 + "|")
    for p, r in rows:
        cols = [cell(r, k, what) for what in ("sd", "median_minus_mean", "var_x_s") for k in LENGTHS]
        print(f"| {p} | {r['flows']} | {r['answer']} | {r['used_s']:.2f} | {r['interval_s']:.2f} | "
              f"{r['episodes']} / {r['lossy_bins']} | " + " | ".join(cols) + " |")  # fmt: skip
    lengths = [f"N={r['flows']} " + "/".join(str(r[k]["length_s"]) for k in LENGTHS[1:]) for _, r in rows]
    print("\nSample lengths (s) of 1x, 2x, 3x per point: " + "; ".join(lengths))


LENGTHS = ("used", "1x", "2x", "3x")


def cell(row: dict, length: str, what: str) -> str:
    v = row[length][what]
    if v is None:
        return "-"
    return {"median_minus_mean": f"{v:+.4f}", "var_x_s": f"{v:.1f}"}.get(what, f"{v:.4f}")


if __name__ == "__main__":
    main()
