"""Shared fixtures. Integration tests build real namespaces and must leave none behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from topologies import netns
from topologies.ledger import STATE_DIR, live_runs
from topologies.tracefs import tracefs_root

BUFSIZE = str(Path(sys.executable).parent / "bufsize")


def ours() -> set[str]:
    """The toolkit's namespaces, less those of live runs of other processes (a concurrent run is not
    a leftover); runs of this process, and of dead ones, count."""
    others = {n for s in live_runs() if s.owner_pid != os.getpid() for n in s.namespaces}
    return {n for n in netns.list_ns() if n.startswith(netns.PREFIX) and n not in others}


def run_states() -> set[str]:
    """Ledger files, less those of live runs of other processes (as ours())."""
    others = {s.path.name for s in live_runs() if s.owner_pid != os.getpid()}
    return {p.name for p in STATE_DIR.glob("run-*.json")} - others


def trace_instances() -> set[str]:
    """The toolkit's private ftrace instances (fidelity, cwnd monitors), less those of other live processes."""
    root = tracefs_root()
    names = {p.name for p in Path(root).glob("instances/bsz-*")} if root else set()

    def other_live(name: str) -> bool:
        pid = name.rsplit("-", 1)[-1]
        return pid.isdigit() and int(pid) != os.getpid() and Path(f"/proc/{pid}").exists()

    return {n for n in names if not other_live(n)}


@pytest.fixture
def root() -> None:
    if os.geteuid() != 0:
        pytest.fail("integration tests need root (they build namespaces and qdiscs)")


@pytest.fixture
def no_leftovers(root):
    """Fails the test if it leaves toolkit namespaces or run state behind (and removes them)."""
    before_ns, before_states, before_traces = ours(), run_states(), trace_instances()
    yield
    left_ns, left_states = ours() - before_ns, run_states() - before_states
    left_traces = trace_instances() - before_traces
    if left_ns or left_states or left_traces:
        subprocess.run([BUFSIZE, "clean"], capture_output=True)
        pytest.fail(
            f"left behind: namespaces {sorted(left_ns)}, state files {sorted(left_states)}, "
            f"trace instances {sorted(left_traces)}"
        )


def bufsize(*args: str, timeout: float = 300, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BUFSIZE, *args], capture_output=True, text=True, timeout=timeout, **kw)


def in_ns(ns: str, *argv: str) -> str:
    return subprocess.run(netns.in_ns(ns, list(argv)), capture_output=True, text=True, check=True).stdout
