"""What a result depends on besides its config: kernel, delay backend, congestion control, offloads,
tool versions and the project's commit. Written into every result and beside every sweep, so a number
explains itself."""

from __future__ import annotations

import os
import platform
import re
import shutil
import time
from pathlib import Path

from bufsize.topologies.description import OFFLOADS_OFF
from bufsize.topologies.errors import RunError
from bufsize.topologies.machine import (
    available_congestion_controls,
    clocksource,
    cpu_model,
    cpuidle_driver,
    kernel_has_module,
    kernel_hz,
    tool_version,
)
from bufsize.topologies.proc import run

REPO = Path(__file__).resolve().parents[2]
# `bufsize remote` ships a commit as `git archive` output, which has no .git: it writes the commit
# it shipped here, so results made from that copy still name their commit.
SHIPPED_COMMIT = REPO / ".bufsize-commit"


def head_from_files(repo: Path | None = None) -> str | None:
    """The checked-out commit read from .git itself (HEAD, the loose ref or packed-refs): no git needed."""
    repo = repo or REPO
    git_dir = repo / ".git"
    try:
        if git_dir.is_file():  # a worktree or submodule: "gitdir: PATH"
            git_dir = (repo / git_dir.read_text().removeprefix("gitdir:").strip()).resolve()
        head = (git_dir / "HEAD").read_text().strip()
        if re.fullmatch(r"[0-9a-f]{40}", head):
            return head  # detached
        ref = head.removeprefix("ref:").strip()
        if not ref.startswith("refs/") or ".." in ref:
            return None
        loose = git_dir / ref
        if loose.is_file():
            sha = loose.read_text().strip()
            return sha if re.fullmatch(r"[0-9a-f]{40}", sha) else None
        common = git_dir / "commondir"  # a worktree keeps its branches in the main repository
        base = (git_dir / common.read_text().strip()).resolve() if common.is_file() else git_dir
        for line in (base / "packed-refs").read_text().splitlines():
            sha, _, name = line.partition(" ")
            if name == ref and re.fullmatch(r"[0-9a-f]{40}", sha):
                return sha
    except (OSError, ValueError):
        return None
    return None


# How long git may take. The VM stage's guest reads the checkout over 9p under an emulated CPU: there
# a plain `git status` re-reads every tracked file (its index names other inodes, and is read-only) and
# can take a minute. A slow git costs the result its dirty flag, never the result.
GIT_TIMEOUT_S = 60.0
# Compare only size and whole-second mtime: a copy, a shared or a read-only checkout then needs no file
# read; a same-size edit within the same second of the index is missed, which a manifest can bear.
STAT_ONLY = ["-c", "core.checkStat=minimal", "-c", "core.trustctime=false"]


def project_commit() -> str:
    """The commit results were made from: git if it is installed, else .git read directly, else the
    commit `bufsize remote` shipped; never an exception (a result must not be lost for want of git)."""
    try:
        res = run(["git", "-C", str(REPO), "rev-parse", "HEAD"], check=False, timeout=GIT_TIMEOUT_S)
    except (OSError, RunError):  # no git on PATH, or one that does not answer
        head = head_from_files()
        why = "git did not answer" if shutil.which("git") else "git not installed"
        return head + f" (uncommitted changes not checked: {why})" if head else _shipped()
    if res.returncode != 0:  # not a checkout, or one git will not read as root ("dubious ownership")
        head = head_from_files()
        return head + " (uncommitted changes not checked: git refused the checkout)" if head else _shipped()
    head = res.stdout.strip()
    argv = ["git", *STAT_ONLY, "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"]
    try:
        status = run(argv, check=False, timeout=GIT_TIMEOUT_S)
    except (OSError, RunError):
        return head + f" (uncommitted changes not checked: git status took over {GIT_TIMEOUT_S:.0f} s)"
    if status.returncode != 0:
        return head + " (uncommitted changes not checked: git status failed)"
    return head + (" (with uncommitted changes)" if status.stdout.strip() else "")


def _shipped() -> str:
    try:
        shipped = SHIPPED_COMMIT.read_text().strip()
    except OSError:
        return "unknown (not a git checkout)"
    return shipped if re.fullmatch(r"[0-9a-f]{40}", shipped) else "unknown (not a git checkout)"


def machine_manifest(
    backend: str, cc: str, shaper: str | None = None, pacer: bool | None = None, halt_poll: dict | None = None
) -> dict:
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "host": platform.node(),  # which machine (bufsize remote merges points from several)
        "kernel": os.uname().release,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        # A VM's CPU model and kernel build can change between boots, and answers with them.
        "cpu_model": cpu_model(),
        "clocksource": clocksource(),
        "kernel_hz": kernel_hz(),
        # How idle vCPUs wait (haltpoll on KVM guests), and the poll a run set
        # (Dumbbell.halt_poll: before and during the run; None without a dumbbell or without haltpoll).
        "cpuidle_driver": cpuidle_driver(),
        "halt_poll": halt_poll,
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
