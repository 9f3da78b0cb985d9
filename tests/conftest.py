"""Shared fixtures. Integration tests build real namespaces and must leave none behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from buffersizing import netns
from buffersizing.runstate import STATE_DIR

BUFSIZE = str(Path(sys.executable).parent / "bufsize")


def ours() -> set[str]:
    return {n for n in netns.list_ns() if n.startswith(netns.PREFIX)}


def run_states() -> set[str]:
    return {p.name for p in STATE_DIR.glob("run-*.json")}


def trace_instances() -> set[str]:
    """The toolkit's private ftrace instances (fidelity, cwnd monitors)."""
    from buffersizing.capabilities import tracefs_root

    root = tracefs_root()
    return {p.name for p in Path(root).glob("instances/bsz-*")} if root else set()


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
