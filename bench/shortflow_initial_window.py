"""Seed 003's transfer experiment at another initial window: does Linux's 10 explain the reversal?

Seed 003 found the sqrtN buffer's transfer-time penalty small at RTT 60 ms and larger at 200 ms;
`bufsize shortexp transfer` (results/shortflows/transfer-2026-11-25) found the opposite for large
files (8.5 x against 1.9 x at 1-2 K packets). Its senders start at Linux's initial window of 10
packets; ns-2's TCP, which the seed ran, starts at 2 (windowInit_'s default since 2001) and
caps the window at 20 packets (window_) unless told otherwise. The sqrtN buffer at
60 ms is 22 packets, two such bursts. This runs the same four points with every sender's initial
window set (`--initcwnd`), into a series directory of its own with the experiment's table and figure.
`bufsize shortexp transfer` has no --initcwnd (only fig10 has); the spec here adds it.

    .venv/bin/python bench/shortflow_initial_window.py --initcwnd 2 --out results/shortflows/transfer-iw2-2026-11-29
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchproc import run_main  # noqa: E402

from bufsize.shortflows.series import run_series  # noqa: E402
from bufsize.shortflows.transfer import TransferSpec  # noqa: E402


@dataclasses.dataclass
class TransferAtWindow(TransferSpec):
    initcwnd: int = 2

    def points(self) -> list:
        return [(n, cfg, b, dataclasses.replace(o, initcwnd=self.initcwnd)) for n, cfg, b, o in super().points()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--initcwnd", type=int, default=2, help="every sender's initial window, packets (default 2)")
    ap.add_argument("--out", required=True, help="the series directory (resumable)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root")
    spec = TransferAtWindow(initcwnd=a.initcwnd)
    res = run_series(Path(a.out), spec, spec.points()[0][1].backend())
    print(res)
    return 0 if not res["failed"] else 1


if __name__ == "__main__":
    run_main(main, "stopped; finished points stay, the same command resumes")
