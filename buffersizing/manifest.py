"""What a result depends on besides its config: kernel, delay backend, congestion control, offloads,
tool versions and the project's commit. Written into every result and beside every sweep, so a number
explains itself."""

from __future__ import annotations

import os
import platform
import re
import time
from pathlib import Path

from topologies.description import OFFLOADS_OFF
from topologies.machine import available_congestion_controls, kernel_has_module, tool_version
from topologies.proc import run

REPO = Path(__file__).resolve().parents[1]
# `bufsize remote` ships a commit as `git archive` output, which has no .git: it writes the commit
# it shipped here, so results made from that copy still name their commit.
SHIPPED_COMMIT = REPO / ".bufsize-commit"


def project_commit() -> str:
    res = run(["git", "-C", str(REPO), "rev-parse", "HEAD"], check=False)
    if res.returncode != 0:
        try:
            shipped = SHIPPED_COMMIT.read_text().strip()
        except OSError:
            return "unknown (not a git checkout)"
        return shipped if re.fullmatch(r"[0-9a-f]{40}", shipped) else "unknown (not a git checkout)"
    dirty = run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"], check=False).stdout.strip()
    return res.stdout.strip() + (" (with uncommitted changes)" if dirty else "")


def machine_manifest(backend: str, cc: str, shaper: str | None = None, pacer: bool | None = None) -> dict:
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "host": platform.node(),  # which machine (bufsize remote merges points from several)
        "kernel": os.uname().release,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "delay_backend": backend,
        "congestion_control": cc,
        "shaper": shaper,
        "pacer": pacer,  # whether the delay line paced the shaper (config, shaper and backend allow it)
        "congestion_controls_available": available_congestion_controls(),
        "bic_module": kernel_has_module("tcp_bic"),
        "offloads_off_on_every_interface": OFFLOADS_OFF[::2],
        "iperf": tool_version(["iperf", "-v"]),
        "iperf3": tool_version(["iperf3", "-v"]),
        "tc": tool_version(["tc", "-V"]),
        "project_commit": project_commit(),
    }
