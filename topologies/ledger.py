"""What a run created, written to disk before it is created, so any teardown removes exactly that.

One JSON file per run under STATE_DIR names its namespaces, the processes it started (PID and
start time, so a recycled PID is never signalled), the ftrace instances its monitors made and the
global sysctls it changed. A normal end, Ctrl-C, SIGTERM or an exception tears down from it
(topologies.cleanup); after SIGKILL `bufsize clean` does.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from topologies import netns
from topologies.proc import is_same_process, start_time

STATE_DIR = Path(os.environ.get("BUFSIZE_STATE_DIR", "/run/bufsize"))
GLOBAL_SYSCTLS = "global-sysctls.json"
_SAVE_LOCK = threading.Lock()
PORT_BLOCK = 1000  # iperf3 needs a port per client process: up to one per host (400)
PORT_BLOCKS = range(10_000, 60_000, PORT_BLOCK)


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
    trace_instances: list[str] = field(default_factory=list)  # directories under tracefs instances/
    port_base: int | None = None  # first of PORT_BLOCK server ports this run's traffic may use

    @property
    def path(self) -> Path:
        return STATE_DIR / f"run-{self.run_id}.json"

    @property
    def workdir(self) -> Path:
        """Scratch files of the run (delay-line map and stats); removed with it."""
        return STATE_DIR / f"run-{self.run_id}"

    @property
    def ns_prefix(self) -> str:
        """Every namespace of this run is named <prefix><node>."""
        return f"{netns.PREFIX}{self.run_id}-"

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
        # Monitors record their trace instances from their own threads: one writer at a time.
        with _SAVE_LOCK:
            tmp = self.path.with_suffix(f".tmp{os.getpid()}")
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

    def ports(self) -> range:
        """This run's block of server ports, allocated on first use: tracepoints that filter by port
        (the cwnd monitor) then see only this run's flows, whatever else runs on the machine."""
        if self.port_base is None:
            with state_lock():
                used = {s.port_base for s in live_runs(exclude=self.run_id)}
                self.port_base = next((b for b in PORT_BLOCKS if b not in used), None)
                if self.port_base is None:
                    raise RuntimeError(f"all {len(PORT_BLOCKS)} port blocks are taken by live runs")
                self.save()
        return range(self.port_base, self.port_base + PORT_BLOCK)

    def add_trace_instance(self, path: Path) -> None:
        if str(path) not in self.trace_instances:
            self.trace_instances.append(str(path))
            self.save()

    def forget_trace_instance(self, path: Path) -> None:
        self.trace_instances = [p for p in self.trace_instances if p != str(path)]
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
