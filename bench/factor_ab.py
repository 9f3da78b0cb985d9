"""One factor, A against B, alternating: fixed-buffer runs (`bufsize measure`) that differ only in
the options a condition names, run in turn (A, B, A, B, ...) so drift on the machine falls on both.

Made for the many-flow plateau (issues 33 and 34): at one buffer, how do utilization, loss and the
senders' loss recovery (timeouts, tail-loss probes, fast recoveries: monitors/tcpstats.py) change
with the factor? Resumable: a condition's finished round is kept. Median and range per condition.

    .venv/bin/python bench/factor_ab.py --out bench/results/plateau/recovery-n200 --rounds 2 \\
        --condition linux=--loss-recovery,linux --condition dupack=--loss-recovery,dupack \\
        -- --flows 200 --hosts 200 --cc reno --buffer-packets 5 --duration 30
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from benchproc import finish_or_tear_down, run_main
from line_lost_capacity import lost_share

REPO = Path(__file__).resolve().parents[1]
BUFSIZE = str(REPO / ".venv" / "bin" / "bufsize")


def run_one(out: Path, args: list[str]) -> dict:
    """One `bufsize measure` into `out` (kept if it finished before)."""
    res = out / "result.json"
    if not res.exists():
        t0 = time.monotonic()
        rc = finish_or_tear_down([BUFSIZE, "measure", *args, "--out", str(out), "--force"], capture=False).returncode
        if rc not in (0, 3) or not res.exists():  # 3: a result with a flag, kept and counted as such
            raise SystemExit(f"bufsize measure into {out} failed (exit {rc})")
        (out / "wall_s.txt").write_text(f"{time.monotonic() - t0:.0f}\n")
    return json.loads(res.read_text())


def row(r: dict) -> dict:
    tcp = r.get("tcp") or {}
    ref = r.get("reference_rate_mbps")
    util = r["utilization"]
    return {
        "util": util,
        "util_vs_ref": util * r["nominal_rate_mbps"] / ref if ref else None,
        "loss": r["loss_rate"],
        "timeouts_per_retrans": tcp.get("timeouts_per_retrans"),
        "probes_per_retrans": tcp.get("probes_per_retrans"),
        "recoveries_per_retrans": tcp.get("recoveries_per_retrans"),
        # Share of the measured time the line shaper lost after late wake-ups (past its catch-up
        # allowance), and its pacing: the cost and the gain of a larger allowance (--burst-bytes).
        "line_lost": lost_share((r.get("points") or [{}])[0].get("delay_line")),
        "gaps_gt10": (r.get("fidelity") or {}).get("frac_gt10"),
        "valid": r.get("valid"),
    }


def spread(vals: list[float | None]) -> str:
    v = [x for x in vals if x is not None]
    if not v:
        return "-"
    return f"{statistics.median(v):.4f} [{min(v):.4f}-{max(v):.4f}]"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--condition", action="append", required=True, help="NAME=opt,value,... (commas split args)")
    p.add_argument("common", nargs=argparse.REMAINDER, help="-- then the options every run shares")
    a = p.parse_args()
    common = [x for x in a.common if x != "--"]
    conds = []
    for c in a.condition:
        name, _, opts = c.partition("=")
        if not name or "/" in name:
            p.error(f"--condition {c}: NAME=opt,value,...")
        conds.append((name, [x for x in opts.split(",") if x]))
    rows: dict[str, list[dict]] = {n: [] for n, _ in conds}
    for k in range(1, a.rounds + 1):
        for name, opts in conds:
            print(f"[factor_ab] round {k}: {name}", file=sys.stderr, flush=True)
            rows[name].append(row(run_one(a.out / f"{name}-{k}", [*common, *opts])))
    keys = ["util", "util_vs_ref", "loss", "timeouts_per_retrans", "probes_per_retrans", "recoveries_per_retrans"]
    keys += ["line_lost", "gaps_gt10"]
    lines = [
        f"# {a.out.name}: {' '.join(common)}",
        "",
        f"{a.rounds} rounds, conditions alternating; median [range] per condition. Runs flagged invalid: "
        + (", ".join(f"{n} {sum(1 for r in rs if not r['valid'])}" for n, rs in rows.items())),
        "",
        "| condition | options | " + " | ".join(keys) + " |",
        "|---|---|" + "---|" * len(keys),
    ]
    for name, opts in conds:
        cells = [spread([r[key] for r in rows[name]]) for key in keys]
        lines.append(f"| {name} | {' '.join(opts)} | " + " | ".join(cells) + " |")
    (a.out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    run_main(main, "stopped; finished measures stay, the same command resumes")
