"""What a run created, written to disk before it is created, so any teardown removes exactly that.

One JSON file per run under STATE_DIR names its namespaces, the processes it started (PID and
start time, so a recycled PID is never signalled), the ftrace instances its monitors made and the
global sysctls it changed. A normal end, Ctrl-C, SIGTERM or an exception tears down from it
(bufsize.topologies.cleanup); after SIGKILL `bufsize clean` does.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import stat
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path

from bufsize.topologies import netns
from bufsize.topologies.errors import MachineError
from bufsize.topologies.proc import is_same_process, start_time
from bufsize.topologies.tracefs import INSTANCE_PREFIX, TRACEFS_CANDIDATES

STATE_DIR = Path(os.environ.get("BUFSIZE_STATE_DIR", "/run/bufsize"))
# A run's scratch files (the delay line's stats, rewritten every 200 ms, and the line shaper's
# status page) are written inside the delay line's real-time loop. On a disk file system that can
# block: on this machine /run is on the root ext4, and there an open+write+rename of the stats took
# up to 415 ms while a sweep wrote its results; the line stalled that long with a full queue
# (docs/network.md, the stalls behind the disk; bench/results/line-stalls/). So they live on tmpfs:
# in STATE_DIR where it is tmpfs (as /run is on most systems), else here.
SHM_SCRATCH = Path("/dev/shm/bufsize")
GLOBAL_SYSCTLS = "global-sysctls.json"
_SAVE_LOCK = threading.Lock()
PORT_BLOCK = 1000  # iperf3 needs a port per client process: up to one per host (400)
PORT_BLOCKS = range(10_000, 60_000, PORT_BLOCK)
# The only global sysctls a run may change (and `bufsize clean` may write back).
ALLOWED_GLOBAL_SYSCTLS = (
    "net.core.netdev_max_backlog",
    "net.ipv4.tcp_allowed_congestion_control",
    "haltpoll.guest_halt_poll_ns",  # a module parameter (sysctl.MODULE_PARAMETERS)
)
RUN_ID = re.compile(r"[0-9a-f]{6}")
NODE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")  # the part of a namespace name after bsz-<run id>-
TRACE_INSTANCE = re.compile(re.escape(INSTANCE_PREFIX) + r"[a-z]{1,32}-[0-9]{1,10}")
MAX_LEDGER_BYTES = 8 << 20


class LedgerError(ValueError):
    """A ledger (or state file) that cannot be trusted: `bufsize clean` reports it and acts on none of it."""


def check_state_dir() -> None:
    """The state directory must be root's and writable by nobody else, or anyone could plant a
    ledger naming what `clean` should kill. MachineError otherwise (nothing is acted on)."""
    try:
        st = os.lstat(STATE_DIR)
    except FileNotFoundError:
        return
    problem = _unsafe(st, want_dir=True)
    if problem:
        raise MachineError(
            f"refusing to use {STATE_DIR}: {problem}; it must be a directory owned by root and not "
            "writable by group or others (chown root:root, chmod 755)"
        )


def fs_type(path: Path, mounts: str | None = None) -> str | None:
    """The type of the file system that holds `path` (which need not exist yet), from
    /proc/self/mounts (or `mounts`, the same format); None if it cannot be told."""
    if mounts is None:
        try:
            mounts = Path("/proc/self/mounts").read_text()
        except OSError:
            return None
    target = os.path.realpath(path)
    best, kind = "", None
    for line in mounts.splitlines():
        f = line.split()
        if len(f) < 3:
            continue
        # Mount points escape space, tab, newline and backslash as octal (\040 ...).
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), f[1])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):  # the last of equal mounts is the one on top
            best, kind = point, f[2]
    return kind


@cache
def scratch_root() -> Path:
    """Where runs keep scratch files: $BUFSIZE_SCRATCH_DIR if set (bench/line_stalls.py compares
    the two), else STATE_DIR on tmpfs, else SHM_SCRATCH if /dev/shm is tmpfs, else STATE_DIR
    (then the delay line may stall behind the disk; doctor says so)."""
    if os.environ.get("BUFSIZE_SCRATCH_DIR"):
        return Path(os.environ["BUFSIZE_SCRATCH_DIR"])
    if fs_type(STATE_DIR) == "tmpfs" or fs_type(SHM_SCRATCH) != "tmpfs":
        return STATE_DIR
    return SHM_SCRATCH


def make_scratch_root() -> Path:
    """scratch_root(), created root-only-writable and checked like STATE_DIR (it may sit in the
    world-writable /dev/shm, where anyone could have planted it); MachineError if it is not safe."""
    root = scratch_root()
    if root != STATE_DIR:
        root.mkdir(mode=0o755, exist_ok=True)
        problem = _unsafe(os.lstat(root), want_dir=True)
        if problem:
            raise MachineError(f"refusing to use {root} for scratch files: {problem}; remove it")
    return root


def _unsafe(st: os.stat_result, want_dir: bool = False) -> str | None:
    kind_ok = stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)
    if not kind_ok:
        return "a symbolic link or special file" if not want_dir else "not a directory (a symbolic link?)"
    if st.st_uid != 0:
        return f"owned by uid {st.st_uid}, not root"
    if st.st_mode & 0o022:
        return f"writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def read_state_file(path: Path) -> str:
    """The text of a root-owned regular file not writable by group/others; LedgerError otherwise."""
    try:
        st = os.lstat(path)
    except OSError as e:
        raise LedgerError(f"cannot read it ({e.strerror})") from e
    problem = _unsafe(st)
    if problem:
        raise LedgerError(problem)
    if st.st_size > MAX_LEDGER_BYTES:
        raise LedgerError(f"too large ({st.st_size} bytes)")
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise LedgerError(f"cannot read it ({e})") from e


def _is_int(v: object, lo: int, hi: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def validate(data: object, file_run_id: str) -> None:
    """LedgerError unless `data` is exactly what RunState.save writes for run `file_run_id`:
    every field of the right type, the run id that of the file name, every namespace
    bsz-<run id>-<node>, every trace instance a bsz-* directory directly under a tracefs
    instances/ directory, every global sysctl on the allow-list."""
    if not isinstance(data, dict):
        raise LedgerError("not a JSON object")
    fields = {f for f in RunState.__dataclass_fields__}
    if set(data) != fields:
        missing, extra = sorted(fields - set(data)), sorted(set(data) - fields)
        raise LedgerError(f"fields differ from a ledger's (missing {missing}, unknown {extra})")
    run_id = data["run_id"]
    if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id) or run_id != file_run_id:
        raise LedgerError(f"run_id {run_id!r} is not the 6 hex digits of its file name (run-{file_run_id}.json)")
    if not _is_int(data["owner_pid"], 1, 1 << 22):
        raise LedgerError(f"owner_pid {data['owner_pid']!r} is not a process id")
    if data["owner_start"] is not None and not _is_int(data["owner_start"], 0, 1 << 62):
        raise LedgerError(f"owner_start {data['owner_start']!r} is not a start time")
    if not isinstance(data["created"], int | float) or isinstance(data["created"], bool):
        raise LedgerError(f"created {data['created']!r} is not a time")
    for key in ("namespaces", "processes", "global_sysctls", "trace_instances"):
        if not isinstance(data[key], list):
            raise LedgerError(f"{key} is not a list")
    prefix = f"{netns.PREFIX}{run_id}-"
    for ns in data["namespaces"]:
        if not isinstance(ns, str) or not ns.startswith(prefix) or not NODE.fullmatch(ns[len(prefix) :]):
            raise LedgerError(f"namespace {ns!r} is not named {prefix}<node>")
    for p in data["processes"]:
        if not isinstance(p, dict) or set(p) != {"pid", "start", "what"}:
            raise LedgerError(f"process entry {p!r} is not {{pid, start, what}}")
        # pid 1 (init) and 0 are never the toolkit's: refuse the whole ledger rather than risk them.
        if not _is_int(p["pid"], 2, 1 << 22):
            raise LedgerError(f"process pid {p['pid']!r} cannot be one the toolkit started")
        if p["start"] is not None and not _is_int(p["start"], 0, 1 << 62):
            raise LedgerError(f"process start time {p['start']!r} is not a number of ticks")
        if not isinstance(p["what"], str) or len(p["what"]) > 200:
            raise LedgerError("process description is not a short string")
    for name in data["global_sysctls"]:
        if name not in ALLOWED_GLOBAL_SYSCTLS:
            allowed = ", ".join(ALLOWED_GLOBAL_SYSCTLS)
            raise LedgerError(f"global sysctl {name!r} is not one a run may change ({allowed})")
    parents = {str(Path(root) / "instances") for root in TRACEFS_CANDIDATES}
    for d in data["trace_instances"]:
        ok = isinstance(d, str) and os.path.dirname(d) in parents and TRACE_INSTANCE.fullmatch(os.path.basename(d))
        if not ok:
            raise LedgerError(f"trace instance {d!r} is not a bsz-* directory directly under a tracefs instances/")
    if data["port_base"] is not None and data["port_base"] not in PORT_BLOCKS:
        raise LedgerError(f"port_base {data['port_base']!r} is not one of the port blocks")


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
        """Scratch files of the run (delay-line map and stats, line status); removed with it."""
        return scratch_root() / f"run-{self.run_id}"

    @property
    def ns_prefix(self) -> str:
        """Every namespace of this run is named <prefix><node>."""
        return f"{netns.PREFIX}{self.run_id}-"

    @classmethod
    def create(cls) -> RunState:
        check_state_dir()
        with state_lock():
            taken = {p.stem.removeprefix("run-") for p in STATE_DIR.glob("run-*.json")}
            used_ns = set(netns.list_ns())
            while True:
                run_id = secrets.token_hex(3)
                if run_id not in taken and not any(n.startswith(f"{netns.PREFIX}{run_id}-") for n in used_ns):
                    break
            st = cls(run_id, os.getpid(), start_time(os.getpid()), time.time())
            make_scratch_root()
            st.workdir.mkdir(parents=True, exist_ok=True)
            st.save()
        return st

    @classmethod
    def load(cls, path: Path) -> RunState:
        """The ledger at `path`, checked (safe file, valid schema); LedgerError otherwise."""
        if path.parent != STATE_DIR or not path.name.startswith("run-") or not path.name.endswith(".json"):
            raise LedgerError("not a ledger file of the state directory")
        text = read_state_file(path)
        try:
            data = json.loads(text)
        except ValueError as e:
            raise LedgerError(f"not valid JSON ({e})") from e
        validate(data, path.name[len("run-") : -len(".json")])
        return cls(**data)

    def workdir_is_safe(self) -> bool:
        """The scratch directory is a real directory directly in the scratch root (never a link out)."""
        d, root = self.workdir, scratch_root()
        return d.parent == root and not d.is_symlink() and d.resolve().parent == root.resolve()

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


def scan_states() -> tuple[list[RunState], list[tuple[Path, str]]]:
    """Every ledger in the state directory: those that passed the checks, and those refused, with why."""
    states, refused = [], []
    for p in sorted(STATE_DIR.glob("run-*.json")):
        try:
            states.append(RunState.load(p))
        except (LedgerError, TypeError) as e:
            refused.append((p, str(e)))
    return states, refused


def refused_ledger_may_be_live() -> bool:
    """Whether a ledger that failed the checks names an owner that is alive (never acted on; only
    makes others more careful, e.g. not restoring a sysctl under it)."""
    for p, _ in scan_states()[1]:
        try:
            data = json.loads(p.read_text())
            if is_same_process(int(data["owner_pid"]), data.get("owner_start")):
                return True
        except (OSError, ValueError, TypeError, KeyError):
            continue
    return False


def all_states() -> list[RunState]:
    return scan_states()[0]


def live_runs(exclude: str | None = None) -> list[RunState]:
    return [s for s in all_states() if s.run_id != exclude and s.owner_alive()]
