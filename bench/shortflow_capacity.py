"""How many short transfers a second the generator starts on time, and what they cost in CPU.

Open-loop Poisson arrivals of 2-packet transfers (the most connections per byte) over a 200 Mb/s
bottleneck with a large buffer, 10 sender hosts, RTT 20 ms, at rising arrival rates; each rate
`--reps` times. Per run: arrivals asked and done per second, the transfers still running at the
peak (concurrency), how late arrivals started against their schedule (p99: the generator falling
behind shows here first), the generator's CPU per transfer and in all, the machine's idle share,
failures. Results: --out DIR/runs.jsonl and DIR/README.md (median and range per rate).

    .venv/bin/python bench/shortflow_capacity.py --out bench/results/shortflow-capacity
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchproc import finish_or_tear_down, run_main

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bufsize.traffic.workload import MSS_BYTES, wire_bytes  # noqa: E402

BUFSIZE = str(REPO / ".venv" / "bin" / "bufsize")
RATE_MBPS = 200.0
PACKETS = 2


def run_one(rate_per_s: float, seconds: float, out: Path) -> dict:
    load = rate_per_s * wire_bytes(PACKETS * MSS_BYTES) * 8 / (RATE_MBPS * 1e6)
    argv = [BUFSIZE, "shortflows", "--hosts", "10", "--rate-mbps", f"{RATE_MBPS:g}", "--rtt-ms", "20",
            "--cc", "cubic", "--buffer-packets", "2000", "--sizes", f"fixed:{PACKETS}", "--load", f"{load:.6f}",
            "--duration", f"{seconds + 2:g}", "--warmup-s", "2", "--out", str(out), "--force", "--json"]  # fmt: skip
    t0 = time.monotonic()
    res = finish_or_tear_down(argv, timeout=seconds + 300)
    wall = time.monotonic() - t0
    if res.returncode not in (0, 3):
        return {"asked_per_s": rate_per_s, "error": res.stderr.strip().splitlines()[-1:]}
    r = json.loads(res.stdout)
    gen = r["transfers"]["generator"]
    inw = r["transfers"]["in_window"]
    rows = [line.split(",") for line in (out / "transfers.csv").read_text().splitlines()[1:]]
    # Concurrency: transfers running at once, from the start and end times of every row.
    events = sorted([(float(x[6]), 1) for x in rows] + [(float(x[8]) if x[8] else 1e9, -1) for x in rows])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    late = r["transfers"]["open_loop_lateness"]
    return {
        "asked_per_s": rate_per_s,
        "load": round(load, 4),
        "done_per_s": round(inw["done"] / r["window_seconds"], 1),
        "failed": gen["counts"]["failed"],
        "unfinished": gen["counts"]["unfinished"],
        "peak_concurrent": peak,
        "late_p50_ms": round(late.get("p50_s", 0) * 1e3, 3),
        "late_p99_ms": round(late.get("p99_s", 0) * 1e3, 3),
        "generator_cpu_share": round(gen["cpu_seconds"] / gen["wall_seconds"], 3),
        "cpu_us_per_transfer": round(gen["cpu_seconds"] / max(1, gen["counts"]["started"]) * 1e6, 1),
        "machine_idle_min": r["monitors"].get("cpu", {}).get("min_idle_share_per_second"),
        "utilization": r["utilization"],
        "shaper": r["config"]["shaper"],
        "valid": r["valid"],
        "wall_s": round(wall, 1),
    }


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):g} [{min(xs):g}..{max(xs):g}]"


def write_report(out: Path, runs: list[dict], seconds: float) -> None:
    by_rate: dict[float, list[dict]] = {}
    for r in runs:
        if "error" not in r:
            by_rate.setdefault(r["asked_per_s"], []).append(r)
    lines = [
        "# Short-flow generator capacity",
        "",
        f"Open-loop Poisson arrivals of {PACKETS}-packet transfers, {RATE_MBPS:g} Mb/s bottleneck, 2000-packet buffer,",
        f"10 sender hosts, RTT 20 ms, cubic; {seconds:g} s measured per run. Median [range] over the runs.",
        "Written by `bench/shortflow_capacity.py`.",
        "",
        "| asked /s | runs | done /s | peak running | late p99 ms | generator CPU (share of a core) "
        "| CPU us per transfer | machine idle min | failed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for rate, rs in sorted(by_rate.items()):
        idle = [r["machine_idle_min"] for r in rs if r["machine_idle_min"] is not None]
        lines.append(
            f"| {rate:g} | {len(rs)} | {spread([r['done_per_s'] for r in rs])} | "
            f"{spread([r['peak_concurrent'] for r in rs])} | {spread([r['late_p99_ms'] for r in rs])} | "
            f"{spread([r['generator_cpu_share'] for r in rs])} | {spread([r['cpu_us_per_transfer'] for r in rs])} | "
            f"{spread(idle) if idle else '-'} | {sum(r['failed'] for r in rs)} |"
        )
    errors = [r for r in runs if "error" in r]
    if errors:
        lines += ["", f"{len(errors)} runs failed: " + "; ".join(str(e["error"]) for e in errors)]
    (out / "README.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--rates", default="250,500,1000,2000,3000", help="arrivals per second to try")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--seconds", type=float, default=15.0)
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "runs.jsonl"
    runs = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    done = {(r["asked_per_s"], r.get("rep")) for r in runs}
    for rep in range(1, a.reps + 1):
        for rate in [float(x) for x in a.rates.split(",")]:
            if (rate, rep) in done:
                continue
            # Each run's directory is scratch (the figures above are in runs.jsonl), kept out of the repo.
            r = run_one(rate, a.seconds, Path(tempfile.gettempdir()) / "bsz-shortflow-capacity") | {"rep": rep}
            print(json.dumps(r), flush=True)
            runs.append(r)
            with log.open("a") as f:
                f.write(json.dumps(r) + "\n")
    write_report(out, runs, a.seconds)
    print(f"wrote {out}/README.md")
    return 0


if __name__ == "__main__":
    run_main(main, "stopped; the runs written so far stay")
