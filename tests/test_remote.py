"""`bufsize remote` without a network: the plan (pure functions) and the command sequence sent to
machines, with Fabric's own testing helpers (fabric.testing: MockRemote, Session, Command) standing
in for SSH. The same command against real sshd servers is tests/test_remote_real.py."""

from __future__ import annotations

import io
import json
import tarfile
import threading
from pathlib import Path
from unittest.mock import ANY, call

import pytest
from conftest import spec_of
from fabric.testing.base import Command, MockRemote
from fabric.testing.base import Session as FabricSession
from fabric.testing.fixtures import client  # noqa: F401  (Fabric's pytest fixture, used below)
from paramiko import RejectPolicy

from bufsize.remote import run as rm
from bufsize.remote.plan import (
    BadPoint,
    Machine,
    assign,
    check_point,
    merge_point,
    parse_machine,
    parse_machines,
    sweep_argv,
    sweep_id,
    unpack_point,
)
from bufsize.remote.ssh import connect
from bufsize.topologies.errors import UsageError

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SPEC_ARGS = ["--flows", "2,4", "--runs", "1", "--rate-mbps", "20", "--rtt-ms", "20", "--samples", "2", "--cc", "reno"]


# ---- the plan -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,user,address,port,label",
    [
        ("203.0.113.7", "root", "203.0.113.7", 22, "203.0.113.7"),
        ("admin@vm1.example.org:2222", "admin", "vm1.example.org", 2222, "vm1.example.org:2222"),
        ("root@[2001:db8::5]:22", "root", "2001:db8::5", 22, "[2001:db8::5]"),
        ("[2001:db8::5]:2200", "root", "2001:db8::5", 2200, "[2001:db8::5]:2200"),
    ],
)
def test_machines_are_parsed_and_labelled_without_the_user(text, user, address, port, label):
    m = parse_machine(text)
    assert (m.user, m.address, m.port, m.label) == (user, address, port, label)
    assert "@" not in m.label and "/" not in m.path_label and ":" not in m.path_label


@pytest.mark.parametrize(
    "text", ["", "root@", "-oProxyCommand=x", "a b", "root@host:0", "root@host:99999", "us er@h", "h;rm", "[zz]:22"]
)
def test_bad_machines_are_refused(text):
    with pytest.raises(UsageError, match="--machine"):
        parse_machines([text])


# The machines here are Fabric's stand-ins, and so are the manifests they report.
pytestmark = pytest.mark.usefixtures("schema_check_off")


def test_a_machine_given_twice_is_refused():
    with pytest.raises(UsageError, match="given twice"):
        parse_machines(["root@h:22", "admin@h"])


@pytest.mark.parametrize(
    "argv",
    [
        SPEC_ARGS,
        ["--preset", "quick", "--runs", "3"],
        ["--preset", "full", "--precision", "0.1", "--level", "0.95", "--sample-length", "measured"],
        [
            "--preset",
            "full",
            "--no-first-guess",
            "--burst-bytes",
            "3028",
            "--shaper",
            "htb",
            "--pacer",
            "on",
            "--loss-recovery",
            "dupack",
            "--delayed-ack",
            "off",
            "--sender-pacing",
            "on",
            "--max-buffer-packets",
            "99",
            "--settle-s",
            "2.5",
            "--sample-s",
            "1",
            "--tool",
            "iperf3",
            "--target",
            "0.98",
        ],
    ],  # fmt: skip
)
def test_the_sweep_each_machine_runs_is_exactly_the_one_asked_for(argv):
    spec = spec_of(*argv)
    assert spec_of(*sweep_argv(spec)) == spec


def test_sweep_id_depends_on_settings_and_commit_only():
    a, b = spec_of(*SPEC_ARGS), spec_of(*SPEC_ARGS, "--cc", "cubic")
    assert sweep_id(a, COMMIT) == sweep_id(spec_of(*SPEC_ARGS), COMMIT)
    assert len({sweep_id(a, COMMIT), sweep_id(b, COMMIT), sweep_id(a, "f" * 40)}) == 3


def test_split_balances_estimated_time_and_keeps_sweep_order():
    points = [(n, r) for r in (1, 2) for n in (2, 10, 800)]
    cost = {2: 10.0, 10: 10.0, 800: 100.0}.__getitem__
    shares = assign(points, ["a", "b"], cost)
    assert sorted(p for s in shares.values() for p in s) == sorted(points)
    # The two 800-flow searches (the long ones) go to different machines.
    assert sorted(sum(n == 800 for n, _ in s) for s in shares.values()) == [1, 1]
    loads = [sum(cost(n) for n, _ in s) for s in shares.values()]
    assert max(loads) - min(loads) <= 20
    for s in shares.values():
        assert s == sorted(s, key=points.index)  # run-major, as a local sweep


def test_replicate_gives_each_machine_whole_runs_and_moves_those_of_a_machine_not_ready():
    points = [(n, r) for r in range(1, 7) for n in (2, 10)]
    shares = assign(points, ["a", "b", "c"], lambda n: float(n), runs_per_machine=2, order=["a", "b", "c"])
    assert {m: sorted({r for _, r in s}) for m, s in shares.items()} == {"a": [1, 2], "b": [3, 4], "c": [5, 6]}
    shares = assign(points, ["a", "c"], lambda n: float(n), runs_per_machine=2, order=["a", "b", "c"])
    assert {r for _, r in shares["a"]} >= {1, 2} and {r for _, r in shares["c"]} >= {5, 6}
    assert sorted(p for s in shares.values() for p in s) == sorted(points)


def point_tarball(path: Path, members: dict[str, bytes], link: str | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if link:
            info = tarfile.TarInfo("n0002-run1/evil")
            info.type, info.linkname = tarfile.SYMTYPE, link
            tar.addfile(info)
    path.write_bytes(buf.getvalue())
    return buf.getvalue()


def result(flows: int, commit: str = COMMIT, host: str = "vm1") -> bytes:
    return json.dumps(
        {"flows": flows, "buffer_packets": 7, "manifest": {"project_commit": commit, "host": host}}
    ).encode()


def test_a_pulled_point_is_checked_before_it_is_merged(tmp_path):
    good = tmp_path / "good.tgz"
    point_tarball(good, {"n0002-run1/result.json": result(2), "n0002-run1/samples.csv": b"t,u\n"})
    d = unpack_point(good, (2, 1), tmp_path / "in")
    assert check_point(d, (2, 1), COMMIT)["buffer_packets"] == 7
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "n0002-run1").mkdir()
    (out / "n0002-run1" / "error.json").write_text("{}")  # an earlier failed attempt here is replaced
    assert merge_point(out, d, (2, 1))
    assert sorted(f.name for f in (out / "n0002-run1").iterdir()) == ["result.json", "samples.csv"]
    again = unpack_point(good, (2, 1), tmp_path / "in2")
    assert not merge_point(out, again, (2, 1))  # a finished point is never replaced

    for members, link, why in [
        ({"n0002-run1/../../x": b""}, None, "outside"),
        ({"n0004-run1/result.json": result(4)}, None, "outside"),
        ({"n0002-run1/result.json": result(2)}, "/etc/passwd", "not a plain file"),
    ]:
        bad = tmp_path / "bad.tgz"
        point_tarball(bad, members, link)
        with pytest.raises(BadPoint, match=why):
            unpack_point(bad, (2, 1), tmp_path / "bad")
    (tmp_path / "bad.tgz").write_bytes(b"not a tarball")
    with pytest.raises(BadPoint, match="does not unpack"):
        unpack_point(tmp_path / "bad.tgz", (2, 1), tmp_path / "bad")
    other = tmp_path / "other.tgz"
    point_tarball(other, {"n0002-run1/result.json": result(2, commit="f" * 40)})
    with pytest.raises(BadPoint, match="made by commit"):
        check_point(unpack_point(other, (2, 1), tmp_path / "o"), (2, 1), COMMIT)


# ---- SSH: pinned host keys, keys only ----------------------------------------------------------


def test_connections_pin_host_keys_and_log_in_with_the_key_only(client, tmp_path):  # noqa: F811
    """Fabric's `client` fixture: a mocked paramiko SSHClient under a real fabric Connection."""
    known = tmp_path / "known_hosts"
    known.write_text("")
    c = connect(Machine("root", "203.0.113.7", 2222), tmp_path / "id_ed25519", known)
    (policy,) = client.set_missing_host_key_policy.call_args.args
    assert isinstance(policy, RejectPolicy)  # Fabric's default would be AutoAddPolicy
    client.get_host_keys.return_value.load.assert_called_once_with(str(known))
    client.load_system_host_keys.assert_not_called()
    c.open()
    kw = client.connect.call_args.kwargs
    assert kw["hostname"] == "203.0.113.7" and kw["port"] == 2222 and kw["username"] == "root"
    assert kw["key_filename"] == [str(tmp_path / "id_ed25519")]
    assert kw["look_for_keys"] is False and kw["allow_agent"] is False and "password" not in kw


# ---- the command sequence, with Fabric's MockRemote -------------------------------------------


class Session(FabricSession):
    """Fabric's mocked session, whose own check wants connect() called with user, host and port only;
    ours also passes the key-only settings, which are checked here before Fabric's checks run."""

    def safety_check(self):
        if not self.guard_only:
            kw = self.client.connect.call_args.kwargs
            assert kw["look_for_keys"] is False and "password" not in kw, kw
            self.client.connect.call_args = call(username=kw["username"], hostname=kw["hostname"], port=kw["port"])
        super().safety_check()


DOCTOR = json.dumps({"kernel": "6.1.0", "problems": [], "congestion_controls": ["reno", "cubic"],
                     "qdiscs": {"netem": True}, "delay_backend": "netem"})  # fmt: skip


def make_job(tmp_path: Path, spec, out: Path | None = None) -> rm.Job:
    out = out or tmp_path / "out"
    out.mkdir(exist_ok=True)
    tarball = tmp_path / "tree.tar.gz"
    tarball.write_bytes(b"tree")
    known = tmp_path / "known_hosts"
    known.write_text("")
    lines: list[str] = []
    lock = threading.Lock()

    def say(s: str) -> None:
        with lock:
            lines.append(s)

    job = rm.Job(spec, COMMIT, tarball, None, known, "/srv/bsz/{machine}", out, say)
    job.lines = lines  # type: ignore[attr-defined]
    return job


def sent(channels) -> list[str]:
    """The command each mocked channel was given, in order."""
    return [ch.exec_command.call_args.args[0] for ch in channels if ch.exec_command.call_args]


def prepare_commands(shipped: bool = True) -> list[Command]:
    cmds = [Command(out=b"0\nLinux\n"), Command(out=(COMMIT + "\n").encode() if shipped else b"")]
    if not shipped:
        cmds += [Command(out=b"/tmp/bufsize-upload.Ab12\n"), Command(), Command()]  # mktemp, unpack, rm
    return [*cmds, Command(), Command(out=DOCTOR.encode())]  # setup, doctor


def test_a_fresh_machine_gets_the_tree_setup_and_doctor_in_that_order(tmp_path):
    spec = spec_of(*SPEC_ARGS)
    with MockRemote(enable_sftp=True) as remote:
        session = Session(
            host="203.0.113.7", user="root", port=22, commands=prepare_commands(shipped=False),
            enable_sftp=True, transfers=[{"method": "putfo", "fl": ANY, "remotepath": "/tmp/bufsize-upload.Ab12"}],
        )  # fmt: skip
        (channels,) = [remote.expect_sessions(session)]
        r = rm.Remote(Machine("root", "203.0.113.7"), make_job(tmp_path, spec))
        assert r.prepare(), r.error
        cmds = sent(channels)
    root = "/srv/bsz/203.0.113.7"
    src = f"{root}/src/{COMMIT}"
    assert cmds[0] == "sh -c 'id -u; uname -s'"
    assert cmds[1] == f"sh -c 'cat {src}/.bufsize-commit 2>/dev/null || true'"
    assert cmds[2] == "sh -c 'mktemp /tmp/bufsize-upload.XXXXXX'"
    assert f"tar -xzf /tmp/bufsize-upload.Ab12 -C {src}.part" in cmds[3] and f"mv {src}.part {src}" in cmds[3]
    assert COMMIT in cmds[3] and ".bufsize-commit" in cmds[3]
    assert cmds[4] == "sh -c 'rm -f /tmp/bufsize-upload.Ab12'"
    assert f"cd {src} && ./setup.sh" in cmds[5]
    assert cmds[6] == f"sh -c '{src}/.venv/bin/bufsize doctor --json'"
    assert not r.sudo and r.caps["delay_backend"] == "netem"


def test_a_user_with_sudo_runs_everything_through_sudo_and_one_without_is_refused(tmp_path):
    spec = spec_of(*SPEC_ARGS)
    cmds = [Command(out=b"1000\nLinux\n"), Command(exit=0), *prepare_commands()[1:]]
    with MockRemote() as remote:
        channels = remote.expect_sessions(Session(host="vm", user="admin", commands=cmds))
        r = rm.Remote(Machine("admin", "vm"), make_job(tmp_path, spec))
        assert r.prepare(), r.error
        got = sent(channels)
    assert got[1] == "sh -c 'sudo -n true'"
    assert all(c.startswith("sudo -n -- sh -c ") for c in got[2:]), got
    with MockRemote() as remote:
        remote.expect_sessions(
            Session(host="vm", user="admin", commands=[Command(out=b"1000\nLinux\n"), Command(exit=1)])
        )
        (tmp_path / "2").mkdir()
        r = rm.Remote(Machine("admin", "vm"), make_job(tmp_path / "2", spec))
        assert not r.prepare()
    assert "not root and has no password-less sudo" in r.error


@pytest.mark.parametrize(
    "doctor,needle",
    [
        (json.dumps({"problems": ["the kernel has no htb qdisc"], "congestion_controls": ["reno"]}), "no htb qdisc"),
        (json.dumps({"problems": [], "congestion_controls": ["cubic"]}), "no reno congestion control"),
    ],
)
def test_a_machine_that_cannot_run_is_named_with_the_reason(tmp_path, doctor, needle):
    spec = spec_of(*SPEC_ARGS)
    cmds = [*prepare_commands()[:-1], Command(out=doctor.encode(), exit=1)]
    with MockRemote() as remote:
        remote.expect_sessions(Session(host="vm", commands=cmds))
        r = rm.Remote(Machine("root", "vm"), make_job(tmp_path, spec))
        assert not r.prepare()
    assert r.error.startswith("vm: cannot run: ") and needle in r.error


def test_doctor_failing_outright_is_a_clear_error(tmp_path):
    spec = spec_of(*SPEC_ARGS)
    err = b"bufsize doctor: ip netns add bsz-1-probe: Operation not permitted\n"
    cmds = [*prepare_commands()[:-1], Command(err=err, exit=1)]
    with MockRemote() as remote:
        remote.expect_sessions(Session(host="vm", commands=cmds))
        r = rm.Remote(Machine("root", "vm"), make_job(tmp_path, spec))
        assert not r.prepare()
    assert r.error == "vm: bufsize doctor failed: bufsize doctor: ip netns add bsz-1-probe: Operation not permitted"


class Ended:
    """What `deliver` reads of a Dask future that ended: its status, and its result or exception."""

    def __init__(self, status: str, value: object = None) -> None:
        self.status, self.value = status, value

    def result(self) -> object:
        return self.value

    def exception(self) -> object:
        return self.value

    def release(self) -> None:
        pass


def test_a_point_sent_back_is_checked_merged_once_and_credited_to_its_machine(tmp_path):
    spec = spec_of(*SPEC_ARGS)
    job = make_job(tmp_path, spec)
    members = {"n0002-run1/result.json": result(2, host="vm1"), "n0002-run1/samples.csv": b"t,u\n"}
    blob = point_tarball(tmp_path / "p.tgz", members)
    machine = {"host": "vm1", "kernel": "6.1.0"}
    sent_back = {"archive": blob, "machine": machine, "worker": "10.0.0.1"}
    (job.out / "n0002-run1").mkdir()  # made when the point was handed out
    assert rm.deliver(job, Ended("finished", sent_back), (2, 1)) is None
    assert sorted(f.name for f in (job.out / "n0002-run1").iterdir()) == ["result.json", "samples.csv"]
    merged = json.loads((job.out / "manifest.json").read_text())
    assert merged["spec"] == spec.to_dict() and merged["machine"] == machine
    assert merged["remote"] == {"commit": COMMIT, "machines": {"10.0.0.1": {"machine": machine,
                                                                            "points": ["n0002-run1"]}}}  # fmt: skip
    # The same point again (from another machine) is not merged a second time nor credited to it.
    assert rm.deliver(job, Ended("finished", sent_back | {"worker": "10.0.0.2"}), (2, 1)) is None
    assert json.loads((job.out / "manifest.json").read_text())["remote"] == merged["remote"]
    # A point of another commit, or an archive that is not one, is refused with its machine named.
    other = point_tarball(tmp_path / "o.tgz", {"n0004-run1/result.json": result(4, commit="f" * 40)})
    why = rm.deliver(job, Ended("finished", sent_back | {"archive": other}), (4, 1))
    assert why.startswith("not merged: from 10.0.0.1: it was made by commit"), why
    assert rm.deliver(job, Ended("finished", sent_back | {"archive": b"x"}), (4, 1)).endswith(
        "does not unpack (not a gzip file)"
    )
    assert not (job.out / "n0004-run1").exists() and not list(job.out.glob(".incoming-*"))
    # A task that raised, or was cancelled when no worker was left, says so.
    assert rm.deliver(job, Ended("error", RuntimeError("no reno\x1b[2J")), (4, 1)) == "RuntimeError: no reno\\x1b[2J"
    assert rm.deliver(job, Ended("cancelled"), (4, 1)) == "cancelled: no worker was left to run it"


def test_sweep_points_option_takes_only_points_of_the_sweep():
    from bufsize.longlived.sweep import parse_points

    spec = spec_of("--flows", "2,4", "--runs", "2", "--rate-mbps", "20", "--rtt-ms", "20")
    assert parse_points("4:2, 2:1", spec) == [(4, 2), (2, 1)]
    for bad, why in [("2:3", "not a point"), ("8:1", "not a point"), ("2:1,2:1", "twice"), ("2", "N:run"),
                     ("2:x", "N:run"), ("", "N:run")]:  # fmt: skip
        with pytest.raises(UsageError, match=why):
            parse_points(bad, spec)


@pytest.mark.parametrize("argv", [["--preset", "quick"], ["--flows", "2,800"], ["--flows", "2", "--shaper", "auto"]])
def test_remote_workers_get_the_pinned_line_never_auto(argv):
    """Every machine of a remote sweep runs the same method: auto is pinned to the line in the spec
    before the argument list is built, so a worker with netem cannot resolve it to something else."""
    shipped = sweep_argv(spec_of(*argv))
    assert shipped[shipped.index("--shaper") + 1] == "line"
    assert spec_of(*argv, "--shaper", "htb").shaper == "htb"  # an explicit kernel shaper is kept
