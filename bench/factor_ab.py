"""One factor, A against B, alternating: fixed-buffer runs (`bufsize measure`), or whole searches
(`--command search`), that differ only in the options a condition names, run in turn (A, B, A, B,
...) so drift on the machine falls on both.

Made for the many-flow plateau (issues 33 and 34): at one buffer, how do utilization, loss and the
senders' loss recovery (timeouts, tail-loss probes, fast recoveries: monitors/tcpstats.py) change
with the factor? Resumable: a condition's finished round is kept. Median and range per condition.

    .venv/bin/python bench/factor_ab.py --out bench/results/plateau/recovery-n200 --rounds 2 \\
        --condition linux=--loss-recovery,linux --condition dupack=--loss-recovery,dupack \\
        -- --flows 200 --hosts 200 --cc reno --buffer-packets 5 --duration 30

With `--command search` a row is a search's answer, its crossing, the loss and timeouts at the
answer (or at the probed buffer nearest it), the steal and the line's lost share over its
measurements, and its wall time. Re-run once finished, the same command rewrites table.md from
the kept runs.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchproc import finish_or_tear_down, run_main

from bufsize.monitors.tcpstats import recovery_shares
from bufsize.topologies.delay import line_lost_share as lost_share

REPO = Path(__file__).resolve().parents[1]
BUFSIZE = str(REPO / ".venv" / "bin" / "bufsize")


def run_one(command: str, out: Path, args: list[str]) -> dict:
    """One `bufsize measure` (or `search`) into `out` (kept if it finished before)."""
    res = out / "result.json"
    if not res.exists():
        t0 = time.monotonic()
        rc = finish_or_tear_down([BUFSIZE, command, *args, "--out", str(out), "--force"], capture=False).returncode
        if rc not in (0, 3) or not res.exists():  # 3: a result with a flag, kept and counted as such
            raise SystemExit(f"bufsize {command} into {out} failed (exit {rc})")
        (out / "wall_s.txt").write_text(f"{time.monotonic() - t0:.0f}\n")
    return json.loads(res.read_text())


def run_beside(command: str, out: Path, args: list[str], child: list[str], what: str) -> dict:
    """run_one with a process of ours (`child`, an argument list) running beside it from before the
    command starts until it ends, then ended by its PID; a run finished before is kept as it is."""
    if (out / "result.json").exists():
        return run_one(command, out, args)
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(child)
    time.sleep(0.5)
    if proc.poll() is not None:
        raise SystemExit(f"the {what} ended at once (exit {proc.returncode})")
    try:
        return run_one(command, out, args)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)


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


def near_answer(r: dict) -> tuple[float | None, float | None]:
    """Loss and timeouts per retransmission at the answer, or where the answer was not probed (the
    precision rule answers the whole packet above its crossing) at the probed buffer nearest it."""
    ms = r["measurements"]
    if not ms:
        return None, None
    answer = r["buffer_packets"]
    nearest = min({m["buffer_packets"] for m in ms}, key=lambda b: (abs(b - answer), -b))
    at = [m for m in ms if m["buffer_packets"] == nearest]
    drops = sum(m["bottleneck_drops"] for m in at)
    loss = drops / max(1, sum(m["packets_sent"] for m in at) + drops)
    total: dict[str, int] = {}
    for m in at:
        for k, v in (m.get("tcp") or {}).items():
            total[k] = total.get(k, 0) + v
    return loss, recovery_shares(total)["timeouts_per_retrans"]


def search_row(r: dict) -> dict:
    crossing = r.get("crossing") or {}
    lost = [x for m in r["measurements"] if (x := lost_share(m.get("delay_line"))) is not None]
    loss, timeouts = near_answer(r)
    return {
        "answer": r["buffer_packets"],
        "crossing": crossing.get("packets"),
        "loss": loss,
        "timeouts_per_retrans": timeouts,
        "steal": ((r.get("monitors") or {}).get("cpu") or {}).get("mean_steal_share"),
        "line_lost": statistics.median(lost) if lost else None,
        "wall_s": r["wall_seconds"],
        "valid": r.get("valid"),
        "failed": [k for k, v in r["flags"].items() if v is False],
    }


def spread(vals: list[float | None], fmt: str = ".4f") -> str:
    v = [x for x in vals if x is not None]
    if not v:
        return "-"
    return f"{statistics.median(v):{fmt}} [{min(v):{fmt}}-{max(v):{fmt}}]"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--command", choices=("measure", "search"), default="measure")
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
            got = run_one(a.command, a.out / f"{name}-{k}", [*common, *opts])
            rows[name].append(search_row(got) if a.command == "search" else row(got))
    if a.command == "search":
        keys = ["answer", "crossing", "loss", "timeouts_per_retrans", "steal", "line_lost", "wall_s"]
    else:
        keys = ["util", "util_vs_ref", "loss", "timeouts_per_retrans", "probes_per_retrans", "recoveries_per_retrans"]
        keys += ["line_lost", "gaps_gt10"]
    lines = [
        f"# {a.out.name}: bufsize {a.command} {' '.join(common)}",
        "",
        f"{a.rounds} rounds, conditions alternating; median [range] per condition. Runs flagged invalid: "
        + (", ".join(f"{n} {sum(1 for r in rs if not r['valid'])}" for n, rs in rows.items())),
        "",
        "| condition | options | " + " | ".join(keys) + " |",
        "|---|---|" + "---|" * len(keys),
    ]
    for name, opts in conds:
        cells = [spread([r[key] for r in rows[name]], ".4g" if a.command == "search" else ".4f") for key in keys]
        lines.append(f"| {name} | {' '.join(opts)} | " + " | ".join(cells) + " |")
    if a.command == "search":  # every answer, in round order, with the flags that failed
        lines += ["", "Each search (round: answer, flags failed):", ""]
        for name, rs in rows.items():
            each = "; ".join(f"{k}: {r['answer']}" + (f" ({', '.join(r['failed'])})" if r["failed"] else "")
                             for k, r in enumerate(rs, 1))  # fmt: skip
            lines.append(f"- {name}: {each}")
    (a.out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    run_main(main, "stopped; finished measures stay, the same command resumes")
