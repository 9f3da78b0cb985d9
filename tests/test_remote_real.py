"""`bufsize remote` against real OpenSSH servers on this machine, with host key checking on.

Each "machine" is an sshd of our own (`sshd -D -e -f CONFIG`) in its own network namespace (and UTS
namespace, so it has its own host name), reached over a veth pair from here, with a host key and a
client key made for the test, password authentication off and a known_hosts file holding exactly
those two host keys. Both machines share this filesystem, so each gets its own --remote-dir.

The commands a session runs are put back into this machine's own network namespace (ForceCommand,
below): the toolkit raises net.core.netdev_max_backlog, a sysctl that exists only in the initial
network namespace, as it is where sshd runs on a real machine. The SSH connections, the listening
address and killing the server are all the namespace's.

Everything made here (namespaces, veths, sshd processes by PID, files) is removed at the end, also
when a test fails. Nothing is killed by name.
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
    def __init__(self, name: str, ns: str, veth: str, subnet: int, tmp: Path) -> None:
        self.name, self.ns, self.veth = name, ns, veth
        self.host_ip, self.ip = f"10.213.{subnet}.1", f"10.213.{subnet}.2"
        self.dir = tmp / name
        self.dir.mkdir()
        self.config = self.dir / "sshd_config"
        self.hostkey = self.dir / "host_ed25519"
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"root@{self.ip}:{PORT}"

    @property
    def label(self) -> str:
        return f"{self.ip}:{PORT}"

    def build(self, authorized_keys: Path, wheelhouse: Path, session: Path) -> None:
        run("ip", "netns", "add", self.ns)
        run("ip", "link", "add", self.veth, "type", "veth", "peer", "name", "eth0", "netns", self.ns)
        run("ip", "addr", "add", f"{self.host_ip}/30", "dev", self.veth)
        run("ip", "link", "set", self.veth, "up")
        for argv in (["ip", "link", "set", "lo", "up"], ["ip", "addr", "add", f"{self.ip}/30", "dev", "eth0"],
                     ["ip", "link", "set", "eth0", "up"]):  # fmt: skip
            run("ip", "netns", "exec", self.ns, *argv)
        run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"test host {self.name}", "-f", str(self.hostkey))
        self.config.write_text(
            f"ListenAddress {self.ip}\nPort {PORT}\nHostKey {self.hostkey}\nPidFile none\n"
            f"AuthorizedKeysFile {authorized_keys}\nPubkeyAuthentication yes\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nUsePAM no\n"
            # The test's files live under /tmp, which is world-writable: sshd's StrictModes would refuse them.
            f"StrictModes no\nSubsystem sftp {SFTP_SERVER}\nForceCommand {session}\n"
            # The namespaces have no route to a package index: their setup.sh installs from a
            # wheelhouse downloaded here, as a machine with a local mirror would.
            # SHLVL=1: bash (root's shell, which sshd runs every session's command with) then reads no
            # ~/.bashrc (it reads one under sshd only at the top level). This machine's root .bashrc
            # runs `pyenv init`, whose rehash holds a lock file in ~/.pyenv: killing a session
            # mid-rehash, as the lost-machine test does, left the lock behind, and every later session
            # (both machines') waited 60 s for it, so a 2-minute sweep outran its 300 s allowance.
            f"SetEnv PIP_NO_INDEX=1 PIP_FIND_LINKS={wheelhouse} PIP_DISABLE_PIP_VERSION_CHECK=1 SHLVL=1\n"
        )

    def start(self) -> None:
        """sshd in the namespace, in a UTS namespace of its own named after the machine. nsenter,
        unshare and sh exec into sshd, so the PID we hold is sshd's."""
        log = (self.dir / "sshd.log").open("a")
        script = f"hostname bszt-{self.name} && exec {SSHD} -D -e -f {self.config}"
        self.proc = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{self.ns}", "unshare", "--uts", "sh", "-c", script],
            stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        error: OSError | None = None
        while time.monotonic() < deadline:
            try:
                socket.create_connection((self.ip, PORT), timeout=1).close()
                return
            except OSError as e:
                error = e
                assert self.proc.poll() is None, (self.dir / "sshd.log").read_text()
                time.sleep(0.1)
        # What this side saw, for a failure that cannot be rerun: the last error, where the
        # kernel would send the SYN, and whether this thread is still in the initial namespace.
        route = run("ip", "route", "get", self.ip, check=False).stdout.strip()
        addrs = run("ip", "-br", "-4", "addr", check=False).stdout.strip()
        same = os.stat("/proc/thread-self/ns/net").st_ino == os.stat("/proc/1/ns/net").st_ino
        pytest.fail(
            f"could not connect to sshd of {self.name} at {self.ip}:{PORT}: {error!r}; route: {route!r}; "
            f"addresses: {addrs!r}; in the initial namespace: {same}; sshd: {(self.dir / 'sshd.log').read_text()}"
        )

    def kill(self) -> None:
        """The listener and every per-connection sshd under it (all started by us), by PID."""
        if self.proc is None or self.proc.poll() is not None:
            return
        for pid in [*descendants(self.proc.pid), self.proc.pid]:
            with_pid(pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def known_hosts_line(self) -> str:
        key_type, key = (self.dir / "host_ed25519.pub").read_text().split()[:2]
        return f"[{self.ip}]:{PORT} {key_type} {key}\n"

    def remove(self) -> None:
        self.kill()
        run("ip", "link", "del", self.veth, check=False)
        run("ip", "netns", "del", self.ns, check=False)


NS_PREFIX = "bszt-ssh-"


def remove_stale_machines() -> None:
    """The machines of an earlier run of this test that was killed before its teardown (a session
    ended mid-suite left two, with their veths still holding 10.213.200.1 and .201.1): namespaces
    named after a PID that is gone. Deleting the namespace ends its veth pair with it."""
    for name in Path("/run/netns").glob(f"{NS_PREFIX}*"):
        pid = name.name.removeprefix(NS_PREFIX).split("-")[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists() and not run("ip", "netns", "pids", name.name).stdout:
            run("ip", "netns", "del", name.name, check=False)


def free_subnets(count: int) -> list[int]:
    """Third octets x whose 10.213.x.0/30 no address here falls in (a machine this runs on may
    already use some of 10.213/16; a second address in the same /30 would take the route)."""
    used = run("ip", "-4", "-o", "addr", "show").stdout
    taken = {int(p[2]) for p in (w.split("/")[0].split(".") for w in used.split() if w.startswith("10.213."))}
    free = [x for x in range(200, 256) if x not in taken]
    assert len(free) >= count, f"no free 10.213.x.0/30 subnets here: {used}"
    return free[:count]


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
        pytest.fail("this test needs root (namespaces, sshd)")
    if not (Path(SSHD).exists() and Path(SFTP_SERVER).exists()):
        pytest.skip("openssh-server is not installed (./setup.sh test installs it, without starting its service)")
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("bufsize remote ships a git commit; this is not a git checkout")
    tmp = tmp_path_factory.mktemp("ssh")
    tag = f"{os.getpid() % 100000}"  # veth names have 15 characters at most; the namespace has the whole PID
    made_privsep = False
    remove_stale_machines()
    subnets = free_subnets(2)
    ms = [Machine(n, f"{NS_PREFIX}{os.getpid()}-{n}", f"bszt{tag}{n}", subnets[i], tmp) for i, n in enumerate("ab")]
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
        session = tmp / "session"  # what sshd runs for every command and the sftp subsystem
        session.write_text(
            "#!/bin/sh\n"
            f'exec nsenter --net=/proc/{os.getpid()}/ns/net -- /bin/sh -c "${{SSH_ORIGINAL_COMMAND:-exec sh}}"\n'
        )
        session.chmod(0o755)
        for m in ms:
            m.build(authorized, wheelhouse, session)
            m.start()
        known = tmp / "known_hosts"
        known.write_text("".join(m.known_hosts_line() for m in ms))
        yield {"machines": ms, "key": key, "known_hosts": known, "tmp": tmp}
    finally:
        for m in ms:
            m.remove()
        # Workers a failed test left running on the "machines", by the PID files they wrote (only a
        # process whose command line names this test's directory).
        for pidfile in tmp.glob("remote-*/runs/*/worker.pid"):
            pid = int(pidfile.read_text().strip() or 0)
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
            except OSError:
                continue
            if pid > 1 and str(tmp) in cmdline:
                with_pid(pid, signal.SIGTERM)
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
        "--commit", "HEAD", "--flows", flows, "--runs", "1", *FAST, "--poll-s", "1", "--out", str(out), *extra,
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
    assert "2 already merged" in again.stderr and "started its part" not in again.stderr, again.stderr


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


def test_a_machine_lost_part_way_is_resumed(machines, no_leftovers, tmp_path):
    env = machines
    a, b = env["machines"]
    out = tmp_path / "merged"
    argv = [BUFSIZE, *remote_args(env, out, "3,4", "--give-up-s", "3")]
    b_pidfiles = f"remote-{b.ip}_{PORT}/runs/*/worker.pid"
    earlier = set(env["tmp"].glob(b_pidfiles))  # other tests' sweeps on b
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Wait until both parts run, then b goes away: its sshd (and its sessions) killed, and its
        # worker stopped as a shutdown would (SIGTERM, so the search tears down what it built).
        spec_dir = env["tmp"]
        deadline = time.monotonic() + 180
        pidfile = None
        while time.monotonic() < deadline and first.poll() is None:
            found = list(set(spec_dir.glob(b_pidfiles)) - earlier)
            if found and found[0].read_text().strip():
                pidfile = found[0]
                break
            time.sleep(0.5)
        assert pidfile is not None, "b's worker never started"
        time.sleep(5)  # into its search
        worker = int(pidfile.read_text())
        b.kill()
        with_pid(worker, signal.SIGTERM)
        try:
            stdout, stderr = first.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            first.kill()
            _, stderr = first.communicate()
            pytest.fail(f"bufsize remote still running 300 s after b was lost:\n{stderr}\n{worker_logs(env['tmp'])}")
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 1, stderr
    assert f"[{b.label}] lost" in stderr, stderr
    assert "re-run the same command" in stderr
    merged = sorted(p.name for p in out.glob("n*-run*") if (p / "result.json").exists())
    assert len(merged) == 1, (merged, stderr)  # a's point; b's is not
    kept = (out / merged[0] / "result.json").read_bytes()
    lost = [n for n in (3, 4) if f"n{n:04d}-run1" not in merged]
    assert f"its unfinished points: N={lost[0]} run 1" in stderr, stderr

    b.start()
    again = bufsize(*argv[1:], timeout=400)
    assert again.returncode == 0, again.stderr
    assert "1 already merged" in again.stderr
    # Only the point b owed is started again (on whichever machine the plan gives it to).
    (started,) = [line for line in again.stderr.splitlines() if "started its part" in line]
    assert started.endswith(f"1 points: N={lost[0]}/run1"), again.stderr
    assert (out / merged[0] / "result.json").read_bytes() == kept
    assert sorted(p.name for p in out.glob("n*-run*")) == ["n0003-run1", "n0004-run1"]
    assert all((out / p / "result.json").exists() for p in ("n0003-run1", "n0004-run1"))
