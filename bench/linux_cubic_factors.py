"""Linux's CUBIC, one part at a time: the emulated side of the twin's CUBIC factor table
(bench/twin_cubic_factors.py). Each row turns one part of the kernel's tcp_cubic off through its
module parameters (/sys/module/tcp_cubic/parameters): HyStart, fast convergence, the TCP-friendly
region. The link and rule are the published figures' (`--preset full`: 62.5 Mb/s, 87 ms, the
precision rule at +-10 %), N = 10 by default (`--flows`), so that each row compares with the
committed full sweep's emulated answers at the same N and with the twin's table.

The parameters are the whole machine's: each is set just before its search and put back as it was
right after, also when the bench is stopped (Ctrl-C or SIGTERM). Rows alternate round by round so
drift falls on every row alike. Resumable: a finished search is kept.

    .venv/bin/python bench/linux_cubic_factors.py --out bench/results/linux-cubic-factors --rounds 2
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from benchproc import run_main
from factor_ab import run_one

PARAMS = Path("/sys/module/tcp_cubic/parameters")
FACTORS: list[tuple[str, str, dict[str, str]]] = [
    ("default", "Linux's tcp_cubic as it is", {}),
    ("no-hystart", "HyStart off", {"hystart": "0"}),
    ("no-fast-convergence", "fast convergence off", {"fast_convergence": "0"}),
    ("no-tcp-friendliness", "TCP-friendly region off", {"tcp_friendliness": "0"}),
]


def search_args(flows: int) -> list[str]:
    return ["--preset", "full", "--flows", str(flows), "--cc", "cubic"]


@contextlib.contextmanager
def cubic_params(values: dict[str, str]) -> Iterator[None]:
    """tcp_cubic's parameters set to `values` for the block, each put back as it was after."""
    before = {k: (PARAMS / k).read_text().strip() for k in values}
    try:
        for k, v in values.items():
            (PARAMS / k).write_text(v)
        yield
    finally:
        for k, v in before.items():
            (PARAMS / k).write_text(v)


def table(rows: dict[str, list[dict]], t_wall: float, flows: int) -> list[str]:
    lines = [
        f"# Linux's CUBIC, one part at a time: bufsize search {' '.join(search_args(flows))}",
        "",
        "| factor | module parameters | answers (median) | valid | wall a search (s) |",
        "|---|---|---|---|---|",
    ]
    for key, name, values in FACTORS:
        rs = rows[key]
        answers = [r["buffer_packets"] for r in rs]
        params = ", ".join(f"{k}={v}" for k, v in values.items()) or "-"
        walls = ", ".join(str(round(r["wall_seconds"])) for r in rs)
        lines.append(
            f"| {name} | {params} | {', '.join(map(str, answers))} ({statistics.median(answers):g}) | "
            f"{sum(bool(r.get('valid')) for r in rs)}/{len(rs)} | {walls} |"
        )
    lines += ["", f"{sum(map(len, rows.values()))} searches; this invocation {t_wall:.0f} s of wall."]
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--flows", type=int, default=10, help="N (default 10; the twin's table has 2 and 10)")
    a = p.parse_args()
    if not PARAMS.is_dir():
        p.error(f"{PARAMS}: no tcp_cubic module parameters on this kernel")
    # SIGTERM as Ctrl-C, so the parameters are put back on the way out.
    signal.signal(signal.SIGTERM, lambda *_: signal.default_int_handler(signal.SIGINT, None))
    t0 = time.monotonic()
    rows: dict[str, list[dict]] = {key: [] for key, _, _ in FACTORS}
    for k in range(1, a.rounds + 1):
        for key, _, values in FACTORS:
            print(f"[linux_cubic_factors] round {k}: {key}", file=sys.stderr, flush=True)
            with cubic_params(values):
                rows[key].append(run_one("search", a.out / f"{key}-{k}", search_args(a.flows)))
    lines = table(rows, time.monotonic() - t0, a.flows)
    (a.out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    run_main(main, "stopped; finished searches stay and the parameters are as they were; the same command resumes")
