"""The search's stopping rules on the real link, alternating in one sitting (issue 30).

Each run does one `bufsize search` per rule at each N, the rules' order flipping every run so
neither always runs on a machine warmed by the other. The link is the presets' (62.5 Mb/s, 87 ms,
min(N, 400) sender hosts, the line); the rules are the full preset's sequential sign test and the
precision rule. Rows (answer, wall time, samples, probes, validity) go to a resumable JSONL file;
--report prints median [range] per N and rule. bench/search_rule_offline.py is the same comparison
on the simulated link.

    flock /tmp/bsz-bench.lock .venv/bin/python bench/search_rule_ab.py --flows 100,10 --runs 3
    .venv/bin/python bench/search_rule_ab.py --report
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchproc import finish_or_tear_down, run_main

REPO = Path(__file__).resolve().parent.parent
BUFSIZE = str(REPO / ".venv" / "bin" / "bufsize")
# Rows before 2026-11-26 evening ran "sign-test" and "precision" on the model's sample lengths, which
# were then the only ones; "precision-measured" has samples of two measured loss episodes (item 4).
# Every rule before 2026-11-29 noon counted each sample, stolen or not ("--max-sample-steal 0" keeps
# their rows' meaning); "-quiet" retakes samples during which the hypervisor took over 0.5 % of the CPUs.
ALL_SAMPLES = ["--max-sample-steal", "0"]
RULES = {
    "sign-test": ["--samples", "5", "--max-samples", "20", "--resolution", "0.05", "--sample-length", "model",
                  *ALL_SAMPLES],
    "precision": ["--precision", "0.1", "--sample-length", "model", *ALL_SAMPLES],
    "precision-measured": ["--precision", "0.1", "--sample-length", "measured", *ALL_SAMPLES],
    "precision-0.2-measured": ["--precision", "0.2", "--sample-length", "measured", *ALL_SAMPLES],
    "precision-measured-quiet": ["--precision", "0.1", "--sample-length", "measured", "--max-sample-steal", "0.005"],
}  # fmt: skip


# Each precision rule's --precision, read from its options (the sampling floor is computed at it).
PRECISION = {name: float(args[args.index("--precision") + 1]) for name, args in RULES.items() if "--precision" in args}


def search_run(flows: int, cc: str, rule: str, keep: Path | None = None) -> dict:
    """One search; with `keep`, its result.json and samples.csv are copied there."""
    with tempfile.TemporaryDirectory(prefix="bsz-rule-") as tmp:
        args = [BUFSIZE, "search", "--flows", str(flows), "--hosts", str(min(flows, 400)), "--cc", cc,
                "--rate-mbps", "62.5", "--rtt-ms", "87", "--shaper", "line", *RULES[rule],
                "--out", tmp, "--force", "--json"]  # fmt: skip
        t0 = time.monotonic()
        res = finish_or_tear_down(args)
        wall = time.monotonic() - t0
        if res.returncode not in (0, 3):
            return {"error": res.stderr.strip()[-400:], "wall_s": round(wall, 1)}
        d = json.loads(res.stdout)
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            for name in ("result.json", "samples.csv"):
                shutil.copyfile(Path(tmp) / name, keep / name)
    return {
        "answer": d["buffer_packets"], "interval": d["uncertain_interval_packets"],
        "converged": d["flags"]["converged"], "valid": d["valid"], "wall_s": round(wall, 1),
        "search_wall_s": d["wall_seconds"],
        "samples": sum(len(p["samples"]) for p in d["probes"]), "probes": len(d["probes"]),
        "settles": sum(1 for m in d["measurements"] if m["settle_s"] > 0), "rule": d.get("stopping_rule"),
        "crossing": d.get("crossing"), "sample_rule": d.get("sample_rule"),
        "loss_episodes": d.get("loss_episodes"), "sample_s": sorted({m["sample_s"] for m in d["measurements"]}),
        "commit": d["manifest"]["project_commit"], "loadavg": os.getloadavg()[0],
        "failed_flags": sorted(k for k, v in d["flags"].items() if v is False), "first_guess": d.get("first_guess"),
        "set_aside": d.get("samples_set_aside_for_steal"), "kept_over_limit": d.get("samples_kept_over_steal_limit"),
        # The machine's state during the search: the many-flow answers move with it (findings.md).
        **cpu_medians(d.get("cpu") or {}),
    }  # fmt: skip


def cpu_medians(cpu: dict) -> dict:
    per = cpu.get("per_measurement") or []
    return {f"{k}_median": round(statistics.median(m[k] for m in per), 3) for k in ("busy", "steal")
            if per and all(k in m for m in per)}  # fmt: skip


def med_range(xs: list[float], fmt: str = "{:.0f}") -> str:
    if not xs:
        return "-"
    return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}..{fmt.format(max(xs))}]"


def sampling_floor_s(row: dict, precision: float = 0.1, level: float = 0.9) -> float | None:
    """Seconds of sampling a search needs at least, at the noise and slope its own fit measured: the
    crossing's standard error is (median noise) / (slope x sqrt(samples)), and +-precision at `level`
    needs it to be ln(1 + precision) / z. The slope's own error (Fieller) and the settles only add."""
    c = row.get("crossing") or {}
    slope, sd = c.get("slope_per_ln_buffer") or 0, c.get("sample_sd")
    if slope <= 0 or not sd or not row.get("sample_s"):
        return None
    z = statistics.NormalDist().inv_cdf(0.5 + level / 2)
    samples = (z * math.sqrt(math.pi / 2) * sd / (slope * math.log(1 + precision))) ** 2
    return samples * statistics.median(row["sample_s"])


def report(rows: list[dict]) -> str:
    lines = [
        "| N | cc | rule | code | runs | answer (packets) | CV | wall per search (s) | sampling floor (s) | samples | "
        "settles | valid | CPU busy | steal |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    # Rows of one rule under different --code labels are kept apart: the options stay, the code moves.
    commits = list(dict.fromkeys(r.get("code", "") for r in rows))
    for n, cc in dict.fromkeys((r["flows"], r["cc"]) for r in rows):
        for rule, commit in ((rule, c) for rule in RULES for c in commits):
            rs = [r for r in rows if (r["flows"], r["cc"], r["rule_name"]) == (n, cc, rule)
                  and r.get("code", "") == commit and "error" not in r]  # fmt: skip
            if not rs:
                continue
            ans = [r["answer"] for r in rs]
            cv = statistics.pstdev(ans) / statistics.fmean(ans)
            lines.append(
                f"| {n} | {cc} | {rule} | {commit or '-'} | {len(rs)} | {', '.join(map(str, ans))} | {cv:.3f} | "
                f"{med_range([r['wall_s'] for r in rs])} | "
                f"{med_range([f for r in rs if (f := sampling_floor_s(r, PRECISION.get(rule, 0.1))) is not None])} | "
                f"{med_range([r['samples'] for r in rs])} | "
                f"{med_range([r['settles'] for r in rs])} | {sum(r['valid'] for r in rs)}/{len(rs)} | "
                f"{med_range([r['busy_median'] for r in rs if 'busy_median' in r], '{:.2f}')} | "
                f"{med_range([r['steal_median'] for r in rs if 'steal_median' in r], '{:.3f}')} |"
            )
    errors = [r for r in rows if "error" in r]
    if errors:
        lines.append(f"\n{len(errors)} runs failed: " + "; ".join(f"N={r['flows']} {r['rule_name']}" for r in errors))
    return "\n".join(lines)


def keep_dir(keep: str | None, n: int, cc: str, rule: str, run: int) -> Path | None:
    return Path(keep) / f"n{n:04d}-{cc}-{rule}-run{run}" if keep else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flows", default="100,10")
    ap.add_argument("--cc", default="cubic", help="comma-separated; each run takes every cc in turn")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default="bench/results/search-rule-ab.jsonl")
    ap.add_argument("--rules", default="sign-test,precision", help=f"comma-separated, from {', '.join(RULES)}")
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--code", default="", help="a label for the code under test, kept apart in the report")
    ap.add_argument("--keep", help="a directory for each search's result.json and samples.csv (by N, cc, rule, run)")
    a = ap.parse_args()
    path = Path(a.out)
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    if a.report:
        print(report(rows))
        return 0
    if os.geteuid() != 0:
        sys.exit("run as root")
    seen = {(r["flows"], r["cc"], r["rule_name"], r["run"]) for r in rows if r.get("code", "") == a.code}
    names = a.rules.split(",")
    if unknown := set(names) - set(RULES):
        sys.exit(f"--rules: unknown {', '.join(sorted(unknown))}")
    # Run by run, so a sitting stopped early still holds every (N, cc) at the same number of runs.
    for run in range(1, a.runs + 1):
        for n in map(int, a.flows.split(",")):
            for cc in a.cc.split(","):
                for rule in names if run % 2 else names[::-1]:
                    if (n, cc, rule, run) in seen:
                        continue
                    row = {"run": run, "flows": n, "cc": cc, "rule_name": rule, "code": a.code,
                           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           **search_run(n, cc, rule, keep_dir(a.keep, n, cc, rule, run))}  # fmt: skip
                    with path.open("a") as fh:
                        fh.write(json.dumps(row) + "\n")
                    print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    run_main(main, "stopped; the rows written so far stay, the next sitting resumes after them")
