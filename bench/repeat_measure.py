"""The same fixed-buffer run K times in a row: how far apart are identical measurements?

Each run starts only when no other bufsize run is live on the machine; a run that another one
overlapped anyway is retried (--attempts) and, if every attempt was overlapped, marked.

Issue 13 asked for ten identical 800-flow runs (`bufsize measure --flows 800 --hosts 400
--rate-mbps 62.5 --rtt-ms 87 --cc reno --buffer-packets 449 --duration 15`) to agree within one
point of utilization, or for the reason they cannot. Each run is a fresh `bufsize measure` process
(its own dumbbell), so leftovers of one run would show in the next; the machine's load and the
leftovers named by each run are recorded beside the numbers. Resumable: finished runs are kept.

    .venv/bin/python bench/repeat_measure.py --runs 10 --out bench/results/repeat-800
    .venv/bin/python bench/repeat_measure.py --runs 3 --out DIR -- --flows 200 --hosts 100 ...
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUFSIZE = str(REPO / ".venv" / "bin" / "bufsize")
DEFAULT = ["--flows", "800", "--hosts", "400", "--rate-mbps", "62.5", "--rtt-ms", "87", "--cc", "reno",
           "--buffer-packets", "449", "--duration", "15"]  # fmt: skip


STATE_DIR = Path("/run/bufsize")


def other_runs(own_pid: int | None) -> set[str]:
    """Ledgers of live bufsize runs on this machine other than the one started by own_pid."""
    found = set()
    for p in STATE_DIR.glob("run-*.json"):
        try:
            owner = json.loads(p.read_text()).get("owner_pid")
        except (OSError, ValueError):
            continue
        if owner != own_pid and owner and Path(f"/proc/{owner}").exists():
            found.add(p.stem)
    return found


def wait_for_quiet(poll: float = 5.0) -> None:
    """The machine is shared (tests, other benchmarks): start only when no other run is live."""
    while other_runs(None):
        time.sleep(poll)


def watch_others(proc: subprocess.Popen) -> list[str]:
    """Until proc ends: other runs that were live at any moment (their load spoils the figures)."""
    seen: set[str] = set()
    while proc.poll() is None:
        seen |= other_runs(proc.pid)
        time.sleep(1.0)
    return sorted(seen)


def spread(xs: list[float]) -> str:
    if not xs:
        return "-"
    return f"{statistics.median(xs):.4f} [{min(xs):.4f}..{max(xs):.4f}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", default="bench/results/repeat-800")
    ap.add_argument("--attempts", type=int, default=3, help="retries of a run another run overlapped")
    # bufsize measure's own options follow a "--" (argparse would take their values as positionals).
    mine, measure = (
        (sys.argv[1:], [])
        if "--" not in sys.argv
        else (sys.argv[1 : sys.argv.index("--")], sys.argv[sys.argv.index("--") + 1 :])
    )
    a = ap.parse_args(mine)
    a.measure_args = measure
    if os.geteuid() != 0:
        sys.exit("run as root")
    args = a.measure_args or DEFAULT
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    for i in range(1, a.runs + 1):
        d = out / f"run{i:02d}"
        if (d / "result.json").exists():
            continue
        for attempt in range(1, a.attempts + 1):
            wait_for_quiet()
            load = os.getloadavg()
            proc = subprocess.Popen(
                [BUFSIZE, "measure", *args, "--out", str(d), "--force"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            shared = watch_others(proc)
            stdout = proc.stdout.read() if proc.stdout else ""
            proc.wait()
            d.mkdir(parents=True, exist_ok=True)
            info = {"loadavg_before": load, "loadavg_after": os.getloadavg(), "other_runs_meanwhile": shared}
            (d / "load.json").write_text(json.dumps(info) + "\n")
            print(f"run {i} (attempt {attempt}): exit {proc.returncode}, other runs meanwhile {shared}", flush=True)
            print(stdout.strip()[-200:], flush=True)
            if not shared:
                break
    rows = []
    for d in sorted(out.glob("run*")):
        r = json.loads((d / "result.json").read_text()) if (d / "result.json").exists() else None
        if r is None:
            continue
        load = json.loads((d / "load.json").read_text()) if (d / "load.json").exists() else {}
        rows.append(
            {
                "run": d.name,
                "utilization": r["utilization"],
                "loss_rate": r["loss_rate"],
                "reference_rate_mbps": r["reference_rate_mbps"],
                "frac_gt10": r["fidelity"].get("frac_gt10"),
                "shaper": r.get("manifest", {}).get("shaper"),
                "line_lost_ms": r["fidelity"].get("line", {}).get("lost_ms"),
                "cpu_idle": min(p["cpu"]["idle"] for p in r["points"]),
                "established_s": r["flows_start"]["seconds_to_all_established"],
                "valid": r["valid"],
                "flagged": [k for k, v in r["flags"].items() if v is False],
                "load_before": load.get("loadavg_before", [None])[0],
                "shared": bool(load.get("other_runs_meanwhile")),
            }
        )
    utils = [r["utilization"] for r in rows]
    lines = [
        f"# {len(rows)} identical fixed-buffer runs ({time.strftime('%Y-%m-%d %H:%M')}, {os.uname().release})",
        "",
        f"    .venv/bin/python bench/repeat_measure.py --runs {a.runs} --out {a.out} -- {' '.join(a.measure_args)}",
        "",
        f"bufsize measure {' '.join(args)}; this invocation's wall time {time.monotonic() - t0:.0f} s.",
        "",
        "| run | shaper | utilization | loss | reference Mb/s | gaps >10 % off | line lost ms | min CPU idle "
        "| all up (s) | load before | flagged |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['run']} | {r['shaper']} | {r['utilization']:.4f} | {r['loss_rate']:.3f} | {r['reference_rate_mbps']} "
        f"| {r['frac_gt10']} | {r['line_lost_ms']} "
        f"| {r['cpu_idle']} | {r['established_s']} | {r['load_before']} "
        f"| {', '.join(r['flagged']) or '-'}{' (machine shared)' if r['shared'] else ''} |"
        for r in rows
    ]
    if utils:
        lines += [
            "",
            f"Utilization median [range]: {spread(utils)}; spread {100 * (max(utils) - min(utils)):.2f} points.",
        ]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    (out / "summary.json").write_text(json.dumps(rows, indent=1) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
