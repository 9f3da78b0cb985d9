"""`bufsize remote` against real OpenSSH servers on this machine, with host key checking on.

Each "machine" is an sshd of our own (`sshd -D -e -f CONFIG`) in a UTS namespace of its own, so it
has its own host name, listening on an address of this machine's loopback (127.213.0.x: the whole
of 127/8 is this machine's), with a host key and a client key made for the test, password
authentication off and a known_hosts file holding exactly those two host keys. Both machines share
this filesystem, so each gets its own --remote-dir. Their sessions run in this machine's network
namespace, as on a real machine: the SSH forwards that join a machine's Dask worker to the scheduler
listen on its loopback, which is where the worker looks for them.

Everything made here (sshd processes by PID, files) is removed at the end, also when a test fails.
Nothing is killed by name.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import BUFSIZE, bufsize

REPO = Path(__file__).resolve().parents[1]
SSHD = "/usr/sbin/sshd"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"
PORT = 2222
# Tiny sweeps (as tests/test_search_real.py, slower still): they test the distribution, not the
# emulation, and two searches run at once on this machine's cores; HTB, not the line shaper, which
# keeps a CPU busy.
FAST = ["--rate-mbps", "5", "--rtt-ms", "40", "--cc", "reno", "--shaper", "htb", "--settle-s", "1",
        "--sample-s", "0.5", "--samples", "2", "--resolution", "0.3", "--fidelity-s", "0", "--hosts", "4",
        "--precision", "0"]  # fmt: skip

pytestmark = pytest.mark.integration


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check)


class Machine:
    def __init__(self, name: str, ip: str, port: int, tmp: Path) -> None:
        self.name, self.ip, self.port = name, ip, port
        self.dir = tmp / name
        self.dir.mkdir()
        self.config = self.dir / "sshd_config"
        self.hostkey = self.dir / "host_ed25519"
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"root@{self.ip}:{self.port}"

    @property
    def label(self) -> str:
        return f"{self.ip}:{self.port}"

    def build(self, authorized_keys: Path, wheelhouse: Path) -> None:
        run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"test host {self.name}", "-f", str(self.hostkey))
        self.config.write_text(
            f"ListenAddress {self.ip}\nPort {self.port}\nHostKey {self.hostkey}\nPidFile none\n"
            f"AuthorizedKeysFile {authorized_keys}\nPubkeyAuthentication yes\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nUsePAM no\n"
            "AllowTcpForwarding yes\n"
            # The test's files live under /tmp, which is world-writable: sshd's StrictModes would refuse them.
            f"StrictModes no\nSubsystem sftp {SFTP_SERVER}\n"
            # setup.sh on the machines installs from a wheelhouse downloaded here, as a machine with a
            # local mirror would (the CI's machine reaches only its package registries).
            # SHLVL=1: bash (root's shell, which sshd runs every session's command with) then reads no
            # ~/.bashrc (it reads one under sshd only at the top level). This machine's root .bashrc
            # runs `pyenv init`, whose rehash holds a lock file in ~/.pyenv: a session killed
            # mid-rehash leaves the lock behind, and every later session waits 60 s for it.
            f"SetEnv PIP_NO_INDEX=1 PIP_FIND_LINKS={wheelhouse} PIP_DISABLE_PIP_VERSION_CHECK=1 SHLVL=1\n"
        )

    def start(self) -> None:
        """sshd in a UTS namespace of its own, named after the machine. unshare and sh exec into
        sshd, so the PID we hold is sshd's."""
        log = (self.dir / "sshd.log").open("a")
        script = f"hostname bszt-{self.name} && exec {SSHD} -D -e -f {self.config}"
        self.proc = subprocess.Popen(["unshare", "--uts", "sh", "-c", script], stdout=log, stderr=log,
                                     start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + 30
        error: OSError | None = None
        while time.monotonic() < deadline:
            try:
                socket.create_connection((self.ip, self.port), timeout=1).close()
                return
            except OSError as e:
                error = e
                assert self.proc.poll() is None, (self.dir / "sshd.log").read_text()
                time.sleep(0.1)
        pytest.fail(f"could not connect to sshd of {self.name} at {self.label}: {error!r}; "
                    f"sshd: {(self.dir / 'sshd.log').read_text()}")  # fmt: skip

    def kill(self) -> None:
        """The listener and every per-connection sshd under it (all started by us), by PID."""
        if self.proc is None or self.proc.poll() is not None:
            return
        for pid in [*descendants(self.proc.pid), self.proc.pid]:
            with_pid(pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def known_hosts_line(self) -> str:
        key_type, key = (self.dir / "host_ed25519.pub").read_text().split()[:2]
        return f"[{self.ip}]:{self.port} {key_type} {key}\n"

    def worker_pid(self) -> int | None:
        """The Dask worker its sessions run (a process of ours: under our sshd)."""
        if self.proc is None:
            return None
        for pid in descendants(self.proc.pid):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if len(argv) > 2 and argv[1].endswith(b"/dask") and argv[2] == b"worker":
                return pid
        return None


def free_port(ip: str) -> int:
    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


def descendants(pid: int) -> list[int]:
    out: list[int] = []
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return out
    for c in map(int, children):
        out += [*descendants(c), c]
    return out


def with_pid(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


@pytest.fixture(scope="module")
def machines(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.fail("this test needs root (UTS namespaces, sshd)")
    if not (Path(SSHD).exists() and Path(SFTP_SERVER).exists()):
        pytest.skip("openssh-server is not installed (./setup.sh test installs it, without starting its service)")
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("bufsize remote ships a git commit; this is not a git checkout")
    tmp = tmp_path_factory.mktemp("ssh")
    made_privsep = False
    ms = [Machine(n, f"127.213.0.{i + 2}", free_port(f"127.213.0.{i + 2}"), tmp) for i, n in enumerate("ab")]
    try:
        if not Path("/run/sshd").exists():  # sshd's privilege separation directory
            Path("/run/sshd").mkdir(mode=0o755)
            made_privsep = True
        key = tmp / "client_ed25519"
        run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bufsize remote test", "-f", str(key))
        authorized = tmp / "authorized_keys"
        shutil.copy(tmp / "client_ed25519.pub", authorized)
        wheelhouse = tmp / "wheelhouse"
        got = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "-d", str(wheelhouse), "pip", "setuptools", "wheel",
             ".[dev,remote]"], cwd=REPO, capture_output=True, text=True,
        )  # fmt: skip
        assert got.returncode == 0, f"pip download for the machines' setup failed: {got.stderr[-500:]}"
        for m in ms:
            m.build(authorized, wheelhouse)
            m.start()
        known = tmp / "known_hosts"
        known.write_text("".join(m.known_hosts_line() for m in ms))
        yield {"machines": ms, "key": key, "known_hosts": known, "tmp": tmp}
    finally:
        for m in ms:
            m.kill()  # its sessions with it, whose hang-up ends their workers
        if made_privsep:
            shutil.rmtree("/run/sshd", ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


def worker_logs(tmp: Path) -> str:
    """The tail of every worker's log on the machines, for a failure message."""
    parts = []
    for log in sorted(tmp.glob("remote-*/runs/*/worker.log")):
        lines = log.read_text(errors="replace").splitlines()[-15:]
        parts.append(f"--- {log.relative_to(tmp)}\n" + "\n".join(lines))
    return "\n".join(parts) or "no worker logs"


def remote_args(env: dict, out: Path, flows: str, *extra: str) -> list[str]:
    ms = env["machines"]
    return [
        "remote", *[a for m in ms for a in ("--machine", m.address)], "--identity", str(env["key"]),
        "--known-hosts", str(env["known_hosts"]), "--remote-dir", str(env["tmp"] / "remote-{machine}"),
        "--commit", "HEAD", "--flows", flows, "--runs", "1", *FAST, "--out", str(out), *extra,
    ]  # fmt: skip


def schema(x: object) -> object:
    """The shape of a JSON value: keys and types all the way down, not the numbers."""
    if isinstance(x, dict):
        return {k: schema(v) for k, v in x.items()}
    if isinstance(x, list):
        return [schema(x[0])] if x else []
    return "number" if isinstance(x, int | float) and not isinstance(x, bool) else type(x).__name__


def files(d: Path) -> dict[str, set[str]]:
    return {p.name: {f.name for f in p.iterdir()} for p in sorted(d.glob("n*-run*"))}


@pytest.mark.extensive  # the long form: make test-extensive
def test_split_sweep_merges_like_a_local_one(machines, no_leftovers, tmp_path):
    env = machines
    out = tmp_path / "merged"
    # The same points in a local sweep, the reference for the merged files, run meanwhile: the
    # machines spend most of their part in setup.sh, and the three searches at 5 Mb/s on HTB are
    # light (this test checks the files, not the answers).
    local = tmp_path / "local"
    t0 = time.monotonic()
    loc = subprocess.Popen([BUFSIZE, "sweep", "--flows", "2,4", "--runs", "1", *FAST, "--out", str(local)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        res = bufsize(*remote_args(env, out, "2,4"), timeout=600)
        wall = time.monotonic() - t0
        print(f"split sweep of 2 points over 2 machines (setup included): {wall:.0f} s", file=sys.stderr)
        _, loc_err = loc.communicate(timeout=600)
        print(f"the same 2 points in a local sweep, meanwhile: {time.monotonic() - t0:.0f} s", file=sys.stderr)
    finally:
        if loc.poll() is None:
            loc.send_signal(signal.SIGINT)  # the sweep tears down what it built
            loc.communicate(timeout=120)
    assert res.returncode == 0, res.stderr
    for m in env["machines"]:
        assert f"[{m.label}] ready" in res.stderr, res.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    by_machine = manifest["remote"]["machines"]
    # Split: each machine ran one of the two points, and each point's manifest names its machine.
    assert sorted(p for e in by_machine.values() for p in e["points"]) == ["n0002-run1", "n0004-run1"]
    assert all(len(e["points"]) == 1 for e in by_machine.values()), by_machine
    names = {m.label: f"bszt-{m.name}" for m in env["machines"]}
    for label, e in by_machine.items():
        r = json.loads((out / e["points"][0] / "result.json").read_text())
        assert r["manifest"]["host"] == names[label] == e["machine"]["host"]
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        assert r["manifest"]["project_commit"] == head == manifest["remote"]["commit"]
    for name in ("figure.png", "figure.pdf", "table.md", "table.csv"):
        assert (out / name).exists(), name
    assert not list(out.glob(".incoming-*"))

    # The same points run here: the same files per point, the same JSON schema.
    assert loc.returncode == 0, loc_err
    assert files(out) == files(local)
    local_manifest = json.loads((local / "manifest.json").read_text())
    assert manifest["spec"] == local_manifest["spec"]
    assert set(manifest) - set(local_manifest) == {"remote"}
    assert schema(manifest["machine"]) == schema(local_manifest["machine"])
    for p in files(local):
        a, b = (json.loads((d / p / "result.json").read_text()) for d in (out, local))
        assert schema(a) == schema(b) or set(a) == set(b), p  # lists of probes may differ in length only
        assert set(a) == set(b) and set(a["manifest"]) == set(b["manifest"]), p
    assert {p.name for p in out.iterdir()} - {"manifest.json"} == {p.name for p in local.iterdir()} - {"manifest.json"}

    # Run again: nothing is redone or restarted; everything is already merged.
    again = bufsize(*remote_args(env, out, "2,4"), timeout=300)
    assert again.returncode == 0, again.stderr
    assert "2 already merged" in again.stderr and "worker is up" not in again.stderr, again.stderr


# `parallel`: refused before anything is started, it builds nothing (its sshd machines live in UTS
# namespaces on loopback, not in network namespaces), so it runs beside the tests that build.
@pytest.mark.parallel
def test_refuses_a_host_key_not_pinned(machines, tmp_path):
    a, b = machines["machines"]
    only_b = tmp_path / "known_hosts"
    only_b.write_text(b.known_hosts_line())
    env = machines | {"machines": [a], "known_hosts": only_b}
    res = bufsize(*remote_args(env, tmp_path / "out", "2"), timeout=120)
    assert res.returncode == 1, res.stderr
    assert f"[{a.label}] cannot be used: {a.label}: its host key is not in {only_b}" in res.stderr, res.stderr
    assert "nothing was started" in res.stderr
    assert only_b.read_text() == b.known_hosts_line()  # nothing was added to it


@pytest.mark.extensive  # the long form: make test-extensive
def test_a_worker_killed_part_way_has_its_point_run_on_the_other_and_merged_once(machines, no_leftovers, tmp_path):
    """b's Dask worker is killed (SIGKILL) while its point runs: the engine runs that point again on
    a, which merges both; the point b began tears its network down (it gets SIGTERM when its worker
    dies, no_leftovers checks); and nothing of b's is merged."""
    env = machines
    a, b = env["machines"]
    out = tmp_path / "merged"
    argv = [BUFSIZE, *remote_args(env, out, "3,4")]
    b_logs = f"remote-{b.ip}_{b.port}/runs/*/n*-run1.log"
    earlier = set(env["tmp"].glob(b_logs))  # the other tests' points on b
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        began: list[Path] = []
        while time.monotonic() < deadline and first.poll() is None and not began:
            began = sorted(set(env["tmp"].glob(b_logs)) - earlier)
            time.sleep(0.5)
        assert began, "b never began a point"
        time.sleep(8)  # into its search
        worker = b.worker_pid()
        assert worker is not None, "b's Dask worker is not running"
        argv = Path(f"/proc/{worker}/cmdline").read_bytes().decode().split("\0")
        # TLS inside the SSH forwards, to the scheduler and on its own port, with the sweep's key there.
        assert argv[3].startswith("tls://127.0.0.1:") and "--tls-key" in argv, argv
        assert argv[argv.index("--listen-address") + 1].startswith("tls://127.0.0.1:"), argv
        key = Path(argv[argv.index("--tls-key") + 1])
        assert key.stat().st_mode & 0o777 == 0o600 and key.is_relative_to(env["tmp"]), key
        with_pid(worker, signal.SIGKILL)
        try:
            _, stderr = first.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            first.kill()
            _, stderr = first.communicate()
            pytest.fail(f"bufsize remote still running 300 s after b's worker was killed:\n{stderr}\n"
                        f"{worker_logs(env['tmp'])}")  # fmt: skip
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGINT)
            first.communicate(timeout=120)
    assert first.returncode == 0, f"{stderr}\n{worker_logs(env['tmp'])}"
    lost = began[0].name.removesuffix(".log")
    # The killed worker's point got SIGTERM, its one signal, and tore its network down.
    log = began[0].read_text()
    assert "interrupted by SIGTERM; everything the run created was removed" in log, log
    assert f"[{b.label}] its worker ended part-way" in stderr, stderr
    manifest = json.loads((out / "manifest.json").read_text())
    by_machine = manifest["remote"]["machines"]
    assert list(by_machine) == [a.label], by_machine
    assert by_machine[a.label]["points"] == ["n0003-run1", "n0004-run1"]
    assert by_machine[a.label]["machine"]["host"] == f"bszt-{a.name}"
    r = json.loads((out / lost / "result.json").read_text())
    assert r["manifest"]["host"] == f"bszt-{a.name}"  # run again, on a
    assert stderr.count(f"point N={int(lost[1:5])} run 1: ") == 1, stderr  # merged once
    assert sorted(p.name for p in out.glob("n*-run*")) == ["n0003-run1", "n0004-run1"]
    assert not key.exists() and not list(out.glob(".incoming-*")), "the sweep's key was left behind"
