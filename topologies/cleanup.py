"""Teardown by ownership: remove what a run's ledger says it created, in reverse order of creation.

`clean_leftovers` is `bufsize clean`: runs whose owner died (SIGKILL, power loss) are torn down from
their ledgers; toolkit namespaces and trace instances that no live run owns are removed last.
"""

from __future__ import annotations

import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from topologies import netns, sysctl
from topologies.ledger import RunState, all_states, live_runs, state_lock
from topologies.proc import start_time, stop_process
from topologies.tracefs import INSTANCE_PREFIX, tracefs_root

HELD_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


@contextmanager
def signals_held() -> Iterator[None]:
    """A second Ctrl-C must not abort a teardown half-way: hold signals until it is done (they arrive after)."""
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)
    except (ValueError, OSError):  # not the main thread of the main interpreter
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def teardown(state: RunState) -> list[str]:
    """Remove everything the run recorded. Returns what was removed."""
    with signals_held():
        removed: list[str] = []
        for p in reversed(state.processes):
            if stop_process(p["pid"], p["start"]):
                removed.append(f"process {p['pid']} ({p['what']})")
        for d in reversed(state.trace_instances):
            if remove_trace_instance(Path(d)):
                removed.append(f"trace instance {Path(d).name}")
        for ns in reversed(state.namespaces):
            if netns.exists(ns):
                removed += remove_namespace(ns)
        with state_lock():
            removed += sysctl.release_globals(state)
            shutil.rmtree(state.workdir, ignore_errors=True)
            state.path.unlink(missing_ok=True)
        return removed


def remove_trace_instance(d: Path) -> bool:
    """Turn tracing off in a private instance and remove it; False if it was not there."""
    if not d.is_dir():
        return False
    try:
        (d / "events" / "enable").write_text("0")
    except OSError:
        pass
    try:
        d.rmdir()
    except OSError:
        return False
    return True


def remove_namespace(ns: str) -> list[str]:
    """Stop what runs inside one of the toolkit's namespaces (started by the run that made it), then delete it."""
    removed = []
    for pid in netns.pids_in(ns):
        if stop_process(pid, start_time(pid), grace=1.0):
            removed.append(f"process {pid} (in {ns})")
    netns.delete(ns)
    return [*removed, f"namespace {ns}"]


def clean_leftovers() -> list[str]:
    """What `bufsize clean` does: tear down runs whose owner is gone, then orphaned bsz- namespaces."""
    removed: list[str] = []
    for st in all_states():
        if not st.owner_alive():
            removed += teardown(st)
    live_ns = {n for s in live_runs() for n in s.namespaces}
    for ns in netns.list_ns():
        if ns.startswith(netns.PREFIX) and ns not in live_ns:
            removed += remove_namespace(ns)
    with state_lock():
        removed += sysctl.restore_orphaned_globals()
    return removed + remove_stale_trace_instances()


def remove_stale_trace_instances() -> list[str]:
    """Instances bsz-<what>-<pid> whose process is gone (a ledger lost with its run, or an older version's)."""
    root = tracefs_root()
    removed = []
    for d in sorted(Path(root).glob(f"instances/{INSTANCE_PREFIX}*-*")) if root else []:
        pid = d.name.rsplit("-", 1)[1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists() and remove_trace_instance(d):
            removed.append(f"trace instance {d.name}")
    return removed
