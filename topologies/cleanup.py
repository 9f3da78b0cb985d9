"""Teardown by ownership: remove what a run's ledger says it created, in reverse order of creation.

`clean_leftovers` is `bufsize clean`: runs whose owner died (SIGKILL, power loss) are torn down from
their ledgers; toolkit namespaces and trace instances that no live run owns are removed last.
Nothing is taken on trust: the state directory and every ledger are checked first
(bufsize.topologies.ledger.validate), a ledger that fails is reported and none of it is acted on, and a
recorded process is signalled only if it is still the process that was recorded (start time) *and*
it sits in one of the run's own bsz-<run>- namespaces, or it is a child of this very process
tearing down its own run. So a crafted ledger naming pid 1 with its real start time, or any
process outside the run's namespaces, gets nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bufsize.topologies import ledger, netns, sysctl
from bufsize.topologies.ledger import RunState, check_state_dir, live_runs, scan_states, state_lock
from bufsize.topologies.proc import is_running, is_same_process, net_ns_id, parent_pid, start_time, stop_process
from bufsize.topologies.tracefs import INSTANCE_PREFIX, tracefs_root
from bufsize.topologies.units import digits

# The signals a run stops on, tearing down what it built: Ctrl-C, and those a job control or a user
# sends to end a process (SIGQUIT's default would dump core and leave namespaces behind; SIGUSR1's
# would kill at once).
HELD_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1}
# What teardowns in this process could not remove (checked after each one), for the final message.
LEFT_BEHIND: list[str] = []


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


class SignalsDeferred:
    """The stopping signals (HELD_SIGNALS) noted, not acted on, until `release()`, which re-delivers the first.

    For the stretch between finished work and its saved result: a signal held during the teardown
    used to arrive as the teardown ended and the result was never written. Unlike signals_held,
    this also covers a signal the kernel hands to another thread (Python acts on it in the main
    thread whatever the mask of this one). Main thread only; elsewhere it does nothing.
    """

    def __init__(self) -> None:
        self.got: list[int] = []
        self._old: dict[int, object] = {}
        try:
            for s in HELD_SIGNALS:
                self._old[s] = signal.signal(s, self._note)
        except ValueError:  # not the main thread
            self._old.clear()
        _DEFERRALS.append(self)

    def _note(self, signum: int, _frame: object) -> None:
        self.got.append(signum)

    def restore(self) -> int | None:
        """Put the handlers back; the first signal noted, if any (not delivered)."""
        for s, h in self._old.items():
            signal.signal(s, h)  # type: ignore[arg-type]
        self._old.clear()
        if self in _DEFERRALS:
            _DEFERRALS.remove(self)
        return self.got[0] if self.got else None

    def release(self) -> None:
        """Put the handlers back and deliver the first signal noted to them now."""
        first = self.restore()
        if first is not None:
            signal.raise_signal(first)


_DEFERRALS: list[SignalsDeferred] = []


def release_deferred_signals() -> None:
    """Deliver what deferrals nobody released noted (the command line calls this last, so a signal
    is never swallowed by a deferral whose result was not saved after all)."""
    while _DEFERRALS:
        _DEFERRALS[-1].release()


def _ns_ids(state: RunState) -> set[tuple[int, int]]:
    ids = set()
    for ns in state.namespaces:
        try:
            st = os.stat(netns.ns_path(ns))
        except OSError:
            continue
        ids.add((st.st_dev, st.st_ino))
    return ids - host_namespaces()  # a name attached to the host's namespace makes nobody the run's


def belongs_to_run(pid: int, started: int | None, state: RunState, ns_ids: set[tuple[int, int]]) -> bool:
    """Still the recorded process, and in one of the run's namespaces or a child of this process
    tearing down its own run (nsenter may not have switched namespace yet)."""
    if not is_same_process(pid, started) or pid <= 1:
        return False
    if net_ns_id(pid) in ns_ids:
        return True
    return state.owner_pid == os.getpid() and parent_pid(pid) == os.getpid()


def teardown(state: RunState, notes: list[str] | None = None) -> list[str]:
    """Remove everything the run recorded. Returns what was removed; `notes` gets what was not touched, and why."""
    notes = notes if notes is not None else []
    with signals_held():
        removed: list[str] = []
        ns_ids = _ns_ids(state)
        for p in reversed(state.processes):
            if belongs_to_run(p["pid"], p["start"], state, ns_ids):
                if stop_process(p["pid"], p["start"]):
                    removed.append(f"process {p['pid']} ({p['what']})")
            elif is_running(p["pid"], p["start"]):  # not a zombie awaiting its reaper (init here is slow)
                notes.append(f"process {p['pid']} ({p['what']}) not signalled: not in run {state.run_id}'s namespaces")
        for d in reversed(state.trace_instances):
            if remove_trace_instance(Path(d)):
                removed.append(f"trace instance {Path(d).name}")
        for ns in reversed(state.namespaces):
            if netns.exists(ns):
                removed += remove_namespace(ns, notes)
        with state_lock():
            removed += sysctl.release_globals(state)
            if state.workdir_is_safe():
                shutil.rmtree(state.workdir, ignore_errors=True)
            elif state.workdir.exists() or state.workdir.is_symlink():
                notes.append(f"{state.workdir} left: not a plain directory of {ledger.scratch_root()}")
            state.path.unlink(missing_ok=True)
        left = remaining(state)
        LEFT_BEHIND.extend(left)
        return removed


def remaining(state: RunState) -> list[str]:
    """What of a torn-down run is still there (empty when the teardown was complete)."""
    left = [f"namespace {ns}" for ns in state.namespaces if netns.exists(ns)]
    left += [f"process {p['pid']} ({p['what']})" for p in state.processes if is_running(p["pid"], p["start"])]
    left += [f"trace instance {d}" for d in state.trace_instances if Path(d).is_dir()]
    if state.path.exists():
        left.append(f"ledger {state.path}")
    return left


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


def host_namespaces() -> set[tuple[int, int]]:
    """The network namespaces of init and of this process: never a run's."""
    return {i for i in (net_ns_id(1), net_ns_id(os.getpid())) if i is not None}


def remove_namespace(ns: str, refused: list[str] | None = None, recorded: bool = True) -> list[str]:
    """Stop what runs inside one of the toolkit's namespaces (started by the run that made it), then delete it.

    A name that is the host's own namespace (`ip netns attach bsz-x 1`, by mistake or not) gets its
    name removed and nothing signalled; each process is signalled only while it is still in that
    namespace (proc.stop_process checks through a pidfd). `recorded=False`: a namespace no run's
    ledger names (only its bsz- name says it might be ours): nobody in it is signalled, since anyone
    can give a namespace that name; it is deleted only when empty, and otherwise left and said."""
    if not ns.startswith(netns.PREFIX):  # never anyone else's, whoever asks
        return []
    try:
        st = os.stat(netns.ns_path(ns))
        ns_id: tuple[int, int] | None = (st.st_dev, st.st_ino)
    except OSError:
        ns_id = None
    removed = []
    if ns_id is None or ns_id in host_namespaces():
        if refused is not None:
            what = "is the host's own network namespace" if ns_id else "cannot be identified"
            refused.append(f"namespace {ns} {what}: no process in it was signalled")
    elif not recorded and (inside := netns.pids_in(ns)):
        if refused is not None:
            pids = ", ".join(map(str, inside[:5]))
            refused.append(
                f"namespace {ns} left: no run's ledger names it, and processes are in it ({pids}); "
                "none was signalled. End them, then clean again"
            )
        return []
    else:
        for pid in netns.pids_in(ns):
            if pid > 1 and stop_process(pid, start_time(pid), grace=1.0, netns=ns_id):
                removed.append(f"process {pid} (in {ns})")
    netns.delete(ns)
    return [*removed, f"namespace {ns}"]


@dataclass
class CleanReport:
    removed: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # what was not acted on, and why

    def summary(self) -> str:
        done = [f"removed {r}" for r in self.removed]
        return "\n".join([*done, f"cleaned {len(done)} item(s)" if done else "nothing to clean"])


def _run_id_of(path: Path) -> str:
    return path.name[len("run-") : -len(".json")]


def clean_leftovers() -> CleanReport:
    """What `bufsize clean` does: tear down runs whose owner is gone, then orphaned bsz- namespaces.

    MachineError (and nothing done) if the state directory is not root's alone.
    """
    check_state_dir()
    report = CleanReport()
    states, refused = scan_states()
    for path, why in refused:
        report.refused.append(f"skipped {path}: {why}; nothing it names was touched (remove the file by hand)")
    for st in states:
        if not st.owner_alive():
            report.removed += teardown(st, report.refused)
    # Namespaces of a refused ledger's run id are left too: it may be a live run of another version.
    # Decided under the state lock, which a starting run holds while it records and makes its
    # namespaces: otherwise a namespace made between the two lists below would look orphaned.
    with state_lock():
        keep = {n for s in live_runs() for n in s.namespaces}
        refused_prefixes = tuple(f"{netns.PREFIX}{_run_id_of(p)}-" for p, _ in refused)
        for ns in netns.list_ns():
            if ns.startswith(netns.PREFIX) and ns not in keep:
                if refused_prefixes and ns.startswith(refused_prefixes):
                    report.refused.append(f"namespace {ns} left: its run's ledger was refused")
                    continue
                report.removed += remove_namespace(ns, report.refused, recorded=False)
    with state_lock():
        done, bad = sysctl.restore_orphaned_globals()
    report.removed += done
    report.refused += bad
    report.removed += remove_stale_trace_instances()
    return report


def stale_trace_instances() -> list[Path]:
    """Instances bsz-<what>-<pid> whose process is gone (a ledger lost with its run, or an older version's)."""
    root = tracefs_root()
    stale = []
    for d in sorted(Path(root).glob(f"instances/{INSTANCE_PREFIX}*-*")) if root else []:
        pid = d.name.rsplit("-", 1)[1]
        if digits(pid) and not Path(f"/proc/{pid}").exists():
            stale.append(d)
    return stale


def remove_stale_trace_instances() -> list[str]:
    return [f"trace instance {d.name}" for d in stale_trace_instances() if remove_trace_instance(d)]


def find_leftovers(exclude_run: str | None = None) -> list[str]:
    """What dead runs left on this machine, without touching it (`bufsize clean` removes it):
    ledgers whose owner is dead, bsz- namespaces no live run owns, stale bsz-* trace instances,
    and global sysctls still changed for runs that are gone."""
    found: list[str] = []
    names = netns.list_ns()  # before the ledgers: a run records its namespaces before making them
    states, refused = scan_states()
    found += [f"unreadable ledger {p.name}" for p, _ in refused]
    found += [
        f"ledger {s.path.name} (owner {s.owner_pid} dead)"
        for s in states
        if s.run_id != exclude_run and not s.owner_alive()
    ]
    live = [s for s in states if s.owner_alive()]
    owned = {n for s in live for n in s.namespaces}
    # Re-checked: a run that ended meanwhile deleted its namespaces before its ledger.
    found += [f"namespace {n}" for n in names if n.startswith(netns.PREFIX) and n not in owned and netns.exists(n)]
    found += [f"trace instance {d.name}" for d in stale_trace_instances()]
    with state_lock():
        needed = {n for s in live_runs() for n in s.global_sysctls}
        found += [f"sysctl {n} (changed by a dead run)" for n in sorted(set(sysctl.load_originals()) - needed)]
    return found


def leftovers_of_this_process() -> list[str]:
    """What runs of this process left (teardowns found incomplete, or ledgers never torn down)."""
    left = list(dict.fromkeys(LEFT_BEHIND))
    for p in ledger.STATE_DIR.glob("run-*.json"):
        try:
            data = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("owner_pid") == os.getpid():
            left.append(f"ledger {p} and what it lists")
    return left


def what_remains_message() -> str:
    """The truth about this process's teardowns, checked (not assumed), for the last line of an interrupted run."""
    left = leftovers_of_this_process()
    if not left:
        return "everything the run created was removed"
    more = f" and {len(left) - 5} more" if len(left) > 5 else ""
    return f"NOT everything was removed: {', '.join(left[:5])}{more}; run `bufsize clean`"
