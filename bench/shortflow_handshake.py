"""Why 2-packet flows queue more than seed 000's F10, and more at higher link rates.

Fig 10 (results/shortflows/fig10-2026-11-25) measured 1.50, 1.62 and 2.15 x F10 for 2-packet flows
at 5, 10 and 20 Mb/s, and 0.84-1.11 x for longer ones. F10 is an M/G/1 queue fed by bursts that
arrive as a Poisson process. A 2-packet flow (initial window 2) is one burst, but it leaves its
sender only after the handshake, and the SYN waits in the same FIFO: every SYN that arrives while
the queue drains leaves when the work ahead of it is done, so SYNs that arrived apart leave
together, and their bursts arrive together one RTT later. That couples the arrivals to the queue,
by an amount that grows with the RTT in packet times (RTT x C), which F10 does not have.

This script tests that, offline and by experiment:

- replay: the frames of each committed run fed to an ideal FIFO served at exactly C, the bursts at
  three times from the run's own record: planned (the Poisson schedule), started (when the
  generator called connect), connected (handshake done, when the burst was written);
- model (ours, not the seed's): the schedule fed to an ideal FIFO through which the SYN passes
  too, each burst (with the handshake's last ACK) arriving one RTT after its SYN left the queue and
  the FIN and its ACK one RTT after that;
- runs: new 2-packet points at chosen rates, RTTs and seeds, the fig10 experiment's other settings
  (10 hosts, load 0.8, 2000-packet buffer, initial window 2, reno, 5 s warm-up, 40 s window).
  F10 does not change with the RTT; the model says the queue grows with it.

The queue compared is the bytes waiting (not yet being sent) over 1514, the line's own counter;
`mg1_waiting` is the exact M/G/1 count of frames waiting for the same bursts and load, which F10
(subtracting half a burst, not half a frame) puts 0.4 packets lower for bursts of 2 at load 0.8.

    .venv/bin/python bench/shortflow_handshake.py --replay results/shortflows/fig10-2026-11-25/r{5,10,20}-l2
    .venv/bin/python bench/shortflow_handshake.py --out bench/results/shortflow-handshake \\
        --rates 5,20 --rtts 2,20,80 --seeds 1,2,3
"""

from __future__ import annotations

import argparse
import csv
import gzip
import heapq
import json
import os
import statistics
import sys
import time
from pathlib import Path

from benchproc import finish_or_tear_down, run_main

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bufsize.shortflows.stats import size_packets  # noqa: E402
from bufsize.topologies import FRAME_BYTES as FRAME  # noqa: E402

BUFSIZE = str(REPO / ".venv" / "bin" / "bufsize")
SYN, SMALL = 74, 66  # a SYN with its options; a bare ACK or FIN


class IdealFifo:
    """A FIFO served at exactly `rate_bps`, fed in time order; it sums the bytes waiting (arrived,
    not yet being sent, as the line's counter) over the window [lo, hi]."""

    def __init__(self, rate_bps: float, lo: float, hi: float) -> None:
        self.rate_bps, self.lo, self.hi = rate_bps, lo, hi
        self.free_at = float("-inf")
        self.waited = 0.0

    def add(self, t: float, size: int) -> float:
        """One frame arriving at t; returns when it has left."""
        start = max(t, self.free_at)
        self.free_at = start + size * 8 / self.rate_bps
        self.waited += size * max(0.0, min(start, self.hi) - max(t, self.lo))
        return self.free_at

    def mean_waiting(self) -> float:
        """In full frames."""
        return self.waited / (self.hi - self.lo) / FRAME


def mean_waiting(frames: list[tuple[float, int]], rate_bps: float, lo: float, hi: float) -> float:
    fifo = IdealFifo(rate_bps, lo, hi)
    for t, size in sorted(frames):
        fifo.add(t, size)
    return fifo.mean_waiting()


def handshake_model(
    starts: list[float], packets: list[int], rate_bps: float, rtt_s: float, lo: float, hi: float, coupled: bool = True
) -> float:
    """Mean bytes waiting when each flow's SYN queues too and its burst comes one RTT after the SYN leaves.

    With coupled=False the burst comes one RTT after the SYN arrived instead: the same frames and
    load, without the queue's hold on when bursts start (the control)."""
    events = [(t, 0, i) for i, t in enumerate(starts)]  # kind 0: a SYN; else the size of a frame that ends its line
    heapq.heapify(events)
    fifo = IdealFifo(rate_bps, lo, hi)
    while events:
        t, kind, i = heapq.heappop(events)
        left = fifo.add(t, SYN if kind == 0 else kind)
        if kind == 0:  # the burst and the handshake's last ACK, then the FIN and the ACK of the peer's FIN
            burst = (left if coupled else t) + rtt_s
            for size in [SMALL] + [FRAME] * packets[i]:
                heapq.heappush(events, (burst, size, i))
            for size in (SMALL, SMALL):
                heapq.heappush(events, (burst + rtt_s, size, i))
    return fifo.mean_waiting()


def analyse(run: Path) -> dict:
    """The measured queue of one committed 2-packet run beside F10, three replays and the model."""
    r = json.loads((run / "result.json").read_text())
    plain = run / "transfers.csv"  # committed gzipped (bench/results/shortflow-handshake)
    with plain.open() if plain.exists() else gzip.open(run / "transfers.csv.gz", "rt") as f:
        rows = list(csv.DictReader(f))
    rate = r["nominal_rate_mbps"] * 1e6
    rtt = float(r["config"]["rtt_ms"][0]) / 1e3
    packets = [size_packets(int(x["size_bytes"])) for x in rows]
    iw = r["model"].get("initial_window")
    if iw is None or max(packets) > iw:
        raise SystemExit(f"{run}: flows of one burst only (length <= initial window {iw})")
    starts = [float(x["t_start"]) for x in rows if x["in_window"] == "1"]
    lo, hi = min(starts), max(starts)
    f10 = r["model"]["mean_queue_packets_f10"]
    # F10 subtracts half a burst for the burst being sent; the frames of that burst not yet being
    # sent are waiting too, so the M/G/1 count of waiting frames subtracts half a frame (ours).
    rho, m = r["model"]["load"], r["model"]["burst_moments"]
    exact = rho / (2 * (1 - rho)) * m["e2"] / m["e1"] - rho / 2
    measured = r["queue"]["mean_bytes"] / FRAME
    out = {"run": str(run), "rate_mbps": r["nominal_rate_mbps"], "rtt_ms": rtt * 1e3, "seed": r["workload"]["seed"],
           "rtt_c_packets": round(rtt * rate / 8 / FRAME, 1), "load": r["model"]["load"],
           "transfers": len(rows), "measured": round(measured, 2), "f10": f10,
           "mg1_waiting": round(exact, 2)}  # fmt: skip
    for key in ("t_planned", "t_start", "t_connected"):
        frames = [(float(x[key]), FRAME) for x, n in zip(rows, packets, strict=True) for _ in range(n)]
        out[f"replay_{key[2:]}"] = round(mean_waiting(frames, rate, lo, hi), 2)
    planned = [float(x["t_planned"]) for x in rows]
    out["model_uncoupled"] = round(handshake_model(planned, packets, rate, rtt, lo, hi, coupled=False), 2)
    out["model"] = round(handshake_model(planned, packets, rate, rtt, lo, hi), 2)
    # The same, from when the generator actually started each flow (its lateness included).
    started = [float(x["t_start"]) for x in rows]
    out["model_started"] = round(handshake_model(started, packets, rate, rtt, lo, hi), 2)
    hs = sorted(float(x["t_connected"]) - float(x["t_start"]) for x in rows if x["t_connected"])
    out["handshake_ms_p50"] = round(1e3 * hs[len(hs) // 2], 1)
    out["valid"] = r["valid"]
    out["line_kept_time"] = r["flags"].get("line_kept_time")
    return out


def run_point(out: Path, rate: float, rtt: float, seed: int) -> Path:
    d = out / f"r{rate:g}-rtt{rtt:g}-s{seed}"
    if (d / "result.json").exists():
        return d
    args = [BUFSIZE, "shortflows", "--hosts", "10", "--rate-mbps", f"{rate:g}", "--rtt-ms", f"{rtt:g}",
            "--cc", "reno", "--buffer-packets", "2000", "--sizes", "fixed:2", "--load", "0.8",
            "--duration", "45", "--warmup-s", "5", "--initcwnd", "2", "--seed", str(seed),
            "--fidelity-s", "0", "--out", str(d), "--force", "--json"]  # fmt: skip
    t0 = time.monotonic()
    res = finish_or_tear_down(args)
    if res.returncode not in (0, 3):
        raise SystemExit(f"{d}: {res.stderr.strip()[-400:]}")
    print(f"{d.name}: {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    return d


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} [{min(xs):.2f}..{max(xs):.2f}]" if len(xs) > 1 else f"{xs[0]:.2f}"


def ratio_keys() -> tuple[str, ...]:
    return ("f10", "model", "model_started")


def report(rows: list[dict]) -> str:
    keys = ("measured", "f10", "mg1_waiting", "replay_planned", "replay_start", "replay_connected")
    keys += ("model_uncoupled", "model", "model_started")
    head = "| rate Mb/s | RTT ms | RTT x C (packets) | runs | " + " | ".join(keys)
    tail = " | measured / F10 | measured / model | measured / model_started |"
    lines = [head + tail, "|" + " --- |" * (len(keys) + 7)]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["rate_mbps"], r["rtt_ms"]), []).append(r)
    for (rate, rtt), rs in sorted(groups.items()):
        cells = [spread([r[k] for r in rs]) for k in keys]
        ratios = [spread([r["measured"] / r[k] for r in rs]) for k in ratio_keys()]
        lead = f"| {rate:g} | {rtt:g} | {rs[0]['rtt_c_packets']:g} | {len(rs)} | "
        lines.append(lead + " | ".join(cells + ratios) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replay", nargs="+", help="committed 2-packet short-flow runs to analyse")
    ap.add_argument("--out", help="a directory for new runs, runs.jsonl and report.md (resumable)")
    ap.add_argument("--rates", default="5,20", help="bottleneck rates, Mb/s")
    ap.add_argument("--rtts", default="2,20,80", help="RTTs, ms")
    ap.add_argument("--seeds", default="1,2,3", help="workload seeds (one run each)")
    a = ap.parse_args()
    if a.replay:
        rows = [analyse(Path(d)) for d in a.replay]
        print("\n".join(json.dumps(r) for r in rows))
        print(report(rows))
        return 0
    if not a.out:
        ap.error("--replay DIR... or --out DIR")
    if os.geteuid() != 0:
        sys.exit("run as root")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    # Seed by seed, so a sitting stopped early holds every rate and RTT at the same number of runs.
    for seed in map(int, a.seeds.split(",")):
        for rate in map(float, a.rates.split(",")):
            for rtt in map(float, a.rtts.split(",")):
                rows.append(analyse(run_point(out, rate, rtt, seed)))
    (out / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "report.md").write_text(report(rows) + "\n")
    print(report(rows))
    return 0


if __name__ == "__main__":
    run_main(main, "stopped; finished points stay, the next sitting resumes after them")
