"""What a run created, written to disk before it is created, so any teardown removes exactly that.

One JSON file per run under STATE_DIR names its namespaces, the processes it started (PID and
start time, so a recycled PID is never signalled) and the global sysctls it changed. A normal end,
Ctrl-C, SIGTERM or an exception tears down from it; after SIGKILL `bufsize clean` does.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from buffersizing import netns
from buffersizing.proc import is_same_process, start_time, stop_process

STATE_DIR = Path(os.environ.get("BUFSIZE_STATE_DIR", "/run/bufsize"))
GLOBAL_SYSCTLS = "global-sysctls.json"


@contextmanager
def state_lock():
    """Serialises state changes between concurrent runs and `bufsize clean`."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@dataclass
class RunState:
    run_id: str
    owner_pid: int
    owner_start: int | None
    created: float
    namespaces: list[str] = field(default_factory=list)
    processes: list[dict] = field(default_factory=list)
    global_sysctls: list[str] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return STATE_DIR / f"run-{self.run_id}.json"

    @property
    def workdir(self) -> Path:
        """Scratch files of the run (delay-line map and stats); removed with it."""
        return STATE_DIR / f"run-{self.run_id}"

    @classmethod
    def create(cls) -> RunState:
        with state_lock():
            taken = {p.stem.removeprefix("run-") for p in STATE_DIR.glob("run-*.json")}
            used_ns = set(netns.list_ns())
            while True:
                run_id = secrets.token_hex(3)
                if run_id not in taken and not any(n.startswith(f"{netns.PREFIX}{run_id}-") for n in used_ns):
                    break
            st = cls(run_id, os.getpid(), start_time(os.getpid()), time.time())
            st.workdir.mkdir(parents=True, exist_ok=True)
            st.save()
        return st

    @classmethod
    def load(cls, path: Path) -> RunState:
        data = json.loads(path.read_text())
        return cls(**data)

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1))
        os.replace(tmp, self.path)

    def owner_alive(self) -> bool:
        return is_same_process(self.owner_pid, self.owner_start)

    def add_namespaces(self, names: list[str]) -> None:
        self.namespaces.extend(n for n in names if n not in self.namespaces)
        self.save()

    def add_process(self, pid: int, what: str) -> None:
        self.processes.append({"pid": pid, "start": start_time(pid), "what": what})
        self.save()

    def forget_process(self, pid: int) -> None:
        self.processes = [p for p in self.processes if p["pid"] != pid]
        self.save()


def all_states() -> list[RunState]:
    states = []
    for p in sorted(STATE_DIR.glob("run-*.json")):
        try:
            states.append(RunState.load(p))
        except (OSError, ValueError, TypeError):
            continue
    return states


def live_runs(exclude: str | None = None) -> list[RunState]:
    return [s for s in all_states() if s.run_id != exclude and s.owner_alive()]


def teardown(state: RunState) -> list[str]:
    """Remove everything the run recorded, in reverse order of creation. Returns what was removed."""
    from buffersizing import sysctl

    removed: list[str] = []
    for p in reversed(state.processes):
        if stop_process(p["pid"], p["start"]):
            removed.append(f"process {p['pid']} ({p['what']})")
    for ns in reversed(state.namespaces):
        if netns.exists(ns):
            removed += remove_namespace(ns)
    with state_lock():
        removed += sysctl.release_globals(state)
        shutil.rmtree(state.workdir, ignore_errors=True)
        state.path.unlink(missing_ok=True)
    return removed


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
    from buffersizing import sysctl

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
    """ftrace instances bsz-<what>-<pid> (monitors/fidelity.py, monitors/cwnd.py) whose process is gone."""
    from buffersizing.capabilities import tracefs_root

    root = tracefs_root()
    removed = []
    for d in sorted(Path(root).glob("instances/bsz-*-*")) if root else []:
        pid = d.name.rsplit("-", 1)[1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            try:
                d.rmdir()
                removed.append(f"trace instance {d.name}")
            except OSError:
                continue
    return removed
