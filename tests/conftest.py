"""Shared fixtures. Integration tests build real namespaces and must leave none behind."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from bufsize.scaffold.schema import CHECK_ON_WRITE
from bufsize.topologies import netns
from bufsize.topologies.ledger import STATE_DIR, all_states, live_runs
from bufsize.topologies.tracefs import tracefs_root

BUFSIZE = str(Path(sys.executable).parent / "bufsize")
# Every result.json and sweep manifest the toolkit writes during the tests, in this process and in
# the `bufsize` processes the tests start, is checked against its schema as it is written.
os.environ[CHECK_ON_WRITE] = "1"


@pytest.fixture
def schema_check_off(monkeypatch):
    """For tests whose results or manifests are stand-ins (a fake machine, a fake run), not what a
    run writes: the schema check on write would judge the stand-in."""
    monkeypatch.delenv(CHECK_ON_WRITE, raising=False)


def ours() -> set[str]:
    """The toolkit's namespaces, less those of live runs of other processes (a concurrent run is not
    a leftover); runs of this process, and of dead ones, count."""
    others = {n for s in live_runs() if s.owner_pid != os.getpid() for n in s.namespaces}
    return {n for n in netns.list_ns() if n.startswith(netns.PREFIX) and n not in others}


def ledgered_by(pid: int) -> list[str]:
    """The run ledgers a process wrote. The toolkit ledgers each namespace, process and sysctl before it
    makes it, so a command that left none built nothing it left behind; unlike a before-and-after look
    at the machine, this cannot mistake the runs of tests beside it for the command's."""
    return sorted(s.path.name for s in all_states() if s.owner_pid == pid)


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


# Tests generated from one matrix of bad and edge values (tests/test_bad_input.py): the test command and
# the fast tier run every Nth of them (--matrix-sample N), make test-extensive all.
# (The bad values' property samples its own cases, one test per command: test_bad_input.sampled.)
MATRIX_TESTS = ("test_valid_edge_values_pass_validation", "test_real_command_refuses_and_builds_nothing")
# Fixtures that need root: a test that asks for one is marked `root`, so the fast tier (no root, no
# namespaces) can leave it out by marker instead of by a list kept by hand.
ROOT_FIXTURES = {"root", "no_leftovers", "ovs"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--matrix-sample",
        type=int,
        default=1,
        metavar="N",
        help="run one in N of the generated bad-input cases (by a stable hash of the test id); 1: all",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    every = config.getoption("--matrix-sample")
    if every < 1:
        raise pytest.UsageError(f"--matrix-sample must be at least 1, got {every}")
    kept, dropped = [], []
    for item in items:
        if ROOT_FIXTURES & set(getattr(item, "fixturenames", ())) or item.get_closest_marker("integration"):
            item.add_marker(pytest.mark.root)
        name = getattr(item, "originalname", item.name)
        if every > 1 and name in MATRIX_TESTS and zlib.crc32(item.nodeid.encode()) % every:
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(autouse=True)
def same_network_namespace():
    """The main thread of this process must end each test in the namespace it began in: the toolkit
    enters hosts' namespaces in-process (netns.entered), and a main thread left in one would make
    every later test's sockets and subprocesses start there. Fails the test that did it, and puts the
    main thread back so the tests after it still judge their own code."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        before = os.fstat(home).st_ino
        yield
        now = os.stat("/proc/thread-self/ns/net").st_ino
        if now != before:
            netns.setns_fd(home, "the test process's own namespace")
            pytest.fail(f"the test left this process's main thread in another network namespace (inode {now})")
    finally:
        os.close(home)


@pytest.fixture
def root() -> None:
    # Fails, not skips: the full suite runs as root (CI does), and a skipped root test must not pass as
    # a run one. The fast tier deselects these by their `root` marker (added above).
    if os.geteuid() != 0:
        pytest.fail("this test needs root (it builds namespaces and qdiscs, or runs the real command)")


@pytest.fixture
def no_leftovers(root):
    """Fails the test if it leaves toolkit namespaces or run state behind (and removes them)."""
    before_ns, before_states, before_traces = ours(), run_states(), trace_instances()
    yield
    # Read again after a moment: ours() reads the ledgers before the namespaces, so a run another
    # process starts in between (a test beside this one) looks like ours once.
    for _ in range(3):
        left_ns, left_states = ours() - before_ns, run_states() - before_states
        left_traces = trace_instances() - before_traces
        if not (left_ns or left_states or left_traces):
            break
        time.sleep(0.5)
    if left_ns or left_states or left_traces:
        subprocess.run([BUFSIZE, "clean"], capture_output=True)
        pytest.fail(
            f"left behind: namespaces {sorted(left_ns)}, state files {sorted(left_states)}, "
            f"trace instances {sorted(left_traces)}"
        )


OVS_CTL = "/usr/share/openvswitch/scripts/ovs-ctl"


@pytest.fixture
def ovs():
    """ovs-vswitchd running in the VM stage's guest (never on the host: the guest's /etc and /var are
    overlays, so nothing it starts or writes outlives the guest). Bridges a test leaves are removed."""
    wanted = os.environ.get("BSZ_VM_OVS")  # stage.sh: 1 (installed), missing, or 0 (turned off)
    if wanted == "0":
        pytest.skip("OVS test turned off (BSZ_VM_OVS=0)")
    if not (shutil.which("ovs-vsctl") and Path(OVS_CTL).exists()):
        msg = "openvswitch-switch is not installed on the host (BSZ_VM_OVS=1 tests/vm/stage.sh installs it)"
        if wanted == "1":
            pytest.fail(msg)
        pytest.skip(msg)

    def run(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)

    subprocess.run(["modprobe", "openvswitch"], check=True)
    subprocess.run([OVS_CTL, "start", "--system-id=random", "--no-monitor"], check=True, timeout=120)
    before = set(run("ovs-vsctl", "list-br").stdout.split())
    try:
        yield
    finally:
        for br in set(run("ovs-vsctl", "list-br").stdout.split()) - before:
            run("ovs-vsctl", "--if-exists", "del-br", br)
        run(OVS_CTL, "stop")


@contextlib.contextmanager
def killed_if_left(proc: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """A command a test started, killed (ours, by PID) and reaped if it is still running when the
    test's block ends, failed or not."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def bufsize(*args: str, timeout: float = 300, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BUFSIZE, *args], capture_output=True, text=True, timeout=timeout, **kw)


class Isolated(subprocess.CompletedProcess):
    """A command run by isolated(): what it printed, and what it left (`left`: network namespaces and
    run ledger files), or that it ran on past its time (`ran_on`)."""

    left: dict[str, list[str]]
    ran_on: bool


def isolated(argv: list[str], tmp: Path, timeout: float = 20, cwd: Path | None = None) -> Isolated:
    """ARGV as root with a private /run/netns and a private run ledger (tests/isolated_run.py): what it
    builds is seen there alone, so a test can say it built nothing while other tests build beside it."""
    state = Path(tempfile.mkdtemp(prefix="state.", dir=tmp))
    helper = [sys.executable, str(Path(__file__).with_name("isolated_run.py")), str(state), str(timeout), "--"]
    res = subprocess.run(["unshare", "--mount", "--propagation", "private", *helper, *argv], capture_output=True,
                         text=True, timeout=timeout + 180, cwd=cwd)  # fmt: skip
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    run = Isolated(argv, got["rc"], got["stdout"], got["stderr"])
    run.left, run.ran_on = got["left"], got["ran_on"]
    return run


def spec_of(*argv: str):
    """The SweepSpec `bufsize sweep ARGV` would run, built by its own parser (nothing is built)."""
    from bufsize.cli import build_parser
    from bufsize.longlived.sweep import spec_from_args

    return spec_from_args(build_parser().parse_args(["sweep", *argv, "--out", "x"]))


def in_ns(ns: str, *argv: str) -> str:
    return subprocess.run(netns.in_ns(ns, list(argv)), capture_output=True, text=True, check=True).stdout
