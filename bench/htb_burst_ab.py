"""HTB's burst side by side: one frame against ten, at several flow counts and link rates.

Each configuration runs `bufsize measure` with each burst in turn, alternating, so slow drifts of
the machine fall on both. The reference rate (at 2 BDP, the same shaper) is what the shaper can
carry under that load; utilization is the mean rate against it; `mean/C` is against the nominal
rate. gt10 / gt25: busy inter-departure gaps more than 10 % / 25 % off the ideal frame time.
Resumable: each finished run is a line in the JSONL file and is not repeated.

    .venv/bin/python bench/htb_burst_ab.py --runs 3 --out bench/results/htb-burst-sweep.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchproc import finish_or_tear_down, run_main

REPO = Path(__file__).resolve().parents[1]
BUFSIZE = str(REPO / ".venv" / "bin" / "bufsize")
CONFIGS: dict[str, list[str]] = {
    "n50": ["--flows", "50", "--hosts", "50", "--cc", "cubic", "--buffer-packets", "464"],
    "n20": ["--flows", "20", "--hosts", "20", "--cc", "cubic", "--buffer-packets", "100"],
    "n200": ["--flows", "200", "--hosts", "100", "--cc", "cubic", "--buffer-packets", "50"],
    "n800": ["--flows", "800", "--hosts", "400", "--cc", "reno", "--buffer-packets", "449"],
    "155mbps": ["--rate-mbps", "155", "--flows", "50", "--hosts", "50", "--cc", "cubic", "--buffer-packets", "300"],
    "200mbps": ["--rate-mbps", "200", "--flows", "50", "--hosts", "50", "--cc", "cubic", "--buffer-packets", "400"],
}
BURSTS = [1514, 15140]


def helper_digest() -> str:
    """Which build of the delay line ran (the C file can change between commits of one sitting)."""
    path = REPO / "topologies" / "delayline" / "bsz-delayline"
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12] if path.exists() else "missing"


def measure_run(config: str, extra: list[str], duration: float) -> dict:
    """One `bufsize measure` of CONFIGS[config] with extra options; its figures, or the error."""
    with tempfile.TemporaryDirectory(prefix="bsz-ab-") as tmp:
        args = [BUFSIZE, "measure", *CONFIGS[config], "--rtt-ms", "87", "--duration", str(duration),
                *extra, "--out", tmp, "--force", "--json"]  # fmt: skip
        t0 = time.monotonic()
        res = finish_or_tear_down(args)
        wall = time.monotonic() - t0
        if res.returncode not in (0, 3):
            return {"config": config, "error": res.stderr.strip()[-400:], "wall_s": round(wall, 1)}
        d = json.loads(res.stdout)
    p, f = d["points"][0], d["fidelity"]
    rate = d["nominal_rate_mbps"]
    mean = statistics.mean(p["rates_mbps"])
    return {
        "config": config, "util": d["utilization"], "ref": d["reference_rate_mbps"],
        "mean_mbps": round(mean, 2), "mean_over_c": round(mean / rate, 4),
        "min_sec": min(p["rates_mbps"]), "empty": d["queue"]["empty_fraction"], "qmean": d["queue"]["mean_packets"],
        "gt10": f.get("frac_gt10"), "gt25": f.get("frac_gt25"), "lag_p99": f.get("lag_p99_frames"),
        "lag_max": f.get("lag_max_frames"), "idle": p["cpu"]["idle"], "shaper_used": d["config"]["shaper"],
        "valid": d["valid"], "loadavg": os.getloadavg()[0], "wall_s": round(wall, 1),
        "commit": d["manifest"]["project_commit"], "delayline_sha": helper_digest(),
    }  # fmt: skip


def med_range(xs: list[float], fmt: str = "{:.3f}") -> str:
    if not xs:
        return "-"
    return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}..{fmt.format(max(xs))}]"


def report(rows: list[dict]) -> str:
    """Markdown: per configuration and burst, median [range] over the runs."""
    lines = [
        "| config | burst B | runs | mean rate / C | reference / C | slowest 1 s, Mb/s | gt10 | gt25 | CPU idle |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in dict.fromkeys(r["config"] for r in rows):
        for burst in BURSTS:
            rs = [r for r in rows if r["config"] == name and r["burst"] == burst and "error" not in r]
            if not rs:
                continue
            c = rs[0]["mean_mbps"] / rs[0]["mean_over_c"]
            cells = [
                med_range([r["mean_over_c"] for r in rs]),
                med_range([r["ref"] / c for r in rs]),
                med_range([r["min_sec"] for r in rs], "{:.1f}"),
                med_range([r["gt10"] for r in rs]),
                med_range([r["gt25"] for r in rs]),
                med_range([r["idle"] for r in rs], "{:.2f}"),
            ]
            lines.append(f"| {name} | {burst} | {len(rs)} | " + " | ".join(cells) + " |")
    errors = [r for r in rows if "error" in r]
    if errors:
        lines.append(f"\n{len(errors)} runs failed: " + "; ".join(f"{r['config']}/{r['burst']}" for r in errors))
    return "\n".join(lines)


def ab_main(
    doc: str,
    variants: dict,  # variant (a burst, a shaper name) -> extra options of bufsize measure
    key: str,
    report_rows: Callable[[list[dict]], str],
    *,
    runs: int,
    duration: float,
    configs: str,
    out: str,
) -> int:
    """The command line of an A/B benchmark: each config once per variant per run, alternating
    which variant goes first so neither always runs on a machine warmed by the other; resumable
    (each finished run is a JSON line of --out); --report prints the table."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=runs)
    ap.add_argument("--duration", type=float, default=duration)
    ap.add_argument("--configs", default=configs)
    ap.add_argument("--out", default=out)
    ap.add_argument("--report", action="store_true", help="print the table of what --out holds and exit")
    a = ap.parse_args()
    if a.report:
        print(report_rows([json.loads(line) for line in Path(a.out).read_text().splitlines()]))
        return 0
    if os.geteuid() != 0:
        sys.exit("run as root")
    path = Path(a.out)
    done = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    seen = {(r["config"], str(r[key]), r["run"]) for r in done}
    names = list(variants)
    for run in range(1, a.runs + 1):
        for name in a.configs.split(","):
            for variant in names if run % 2 else names[::-1]:
                if (name, str(variant), run) in seen:
                    continue
                row = {"run": run, key: variant, **measure_run(name, variants[variant], a.duration)}
                with path.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)
    return 0


def main() -> int:
    return ab_main(
        __doc__,
        {b: ["--burst-bytes", str(b)] for b in BURSTS},
        "burst",
        report,
        runs=3,
        duration=20,
        configs=",".join(c for c in CONFIGS if c != "n50"),
        out="bench/results/htb-burst-sweep.jsonl",
    )


if __name__ == "__main__":
    run_main(main, "stopped; the rows written so far stay")
