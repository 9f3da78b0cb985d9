"""Nothing is left behind: normal end, exception, SIGTERM, Ctrl-C, and SIGKILL followed by `bufsize clean`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
from conftest import BUFSIZE, bufsize, ours

from topologies import netns, sysctl
from topologies.config import DumbbellConfig
from topologies.dumbbell import Dumbbell
from topologies.ledger import STATE_DIR
from topologies.proc import is_running

pytestmark = pytest.mark.integration


def start_verify(*extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [BUFSIZE, "verify", "--hosts", "2", "--rtt-ms", "20", "--duration", "60", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_traffic(proc: subprocess.Popen, timeout: float = 30) -> dict:
    """Wait until the run has its iperf clients going (part-way through) and return its state."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"verify ended early: {proc.stderr.read() if proc.stderr else ''}"
        for p in STATE_DIR.glob("run-*.json"):
            try:
                st = json.loads(p.read_text())
            except ValueError:
                continue
            if st["owner_pid"] == proc.pid and any("iperf client" in x["what"] for x in st["processes"]):
                time.sleep(0.5)
                return json.loads(p.read_text())
        time.sleep(0.1)
    raise AssertionError("the run never reached its rate test")


def assert_all_gone(st: dict) -> None:
    left = [n for n in st["namespaces"] if netns.exists(n)]
    assert not left, f"namespaces left: {left}"
    alive = [p for p in st["processes"] if is_running(p["pid"], p["start"])]
    assert not alive, f"processes left: {alive}"
    assert not (STATE_DIR / f"run-{st['run_id']}.json").exists()


def test_exception_part_way_removes_everything(no_leftovers, monkeypatch):
    def broken(self):
        raise RuntimeError("injected failure while configuring qdiscs")

    backlog = sysctl.read("net.core.netdev_max_backlog")
    monkeypatch.setattr(Dumbbell, "_configure_qdiscs", broken)
    net = Dumbbell(DumbbellConfig(hosts=3, rtt_ms=[5.0] * 3), "delayline")
    with pytest.raises(RuntimeError, match="injected"), net:
        pass
    assert not any(netns.exists(n) for n in net.namespaces)
    assert sysctl.read("net.core.netdev_max_backlog") == backlog


def test_exception_inside_the_run_removes_everything(no_leftovers):
    with pytest.raises(ZeroDivisionError), Dumbbell(DumbbellConfig(hosts=2, rtt_ms=[5.0] * 2), "delayline") as net:
        pid = net.delayline.proc.pid
        assert netns.exists(net.switch_ns)
        1 / 0  # noqa: B018
    assert not any(netns.exists(n) for n in net.namespaces)
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


@pytest.mark.parametrize("sig,status", [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGINT, 130)])
def test_signal_part_way_removes_everything(no_leftovers, sig, status):
    backlog = sysctl.read("net.core.netdev_max_backlog")
    proc = start_verify()
    try:
        st = wait_for_traffic(proc)
        assert all(netns.exists(n) for n in st["namespaces"])
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == status
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert_all_gone(st)
    assert sysctl.read("net.core.netdev_max_backlog") == backlog


def test_sigkill_leaves_state_that_clean_removes_and_nothing_else(no_leftovers):
    backlog = sysctl.read("net.core.netdev_max_backlog")
    foreign = f"foreign-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", foreign], check=True)
    proc = start_verify()
    try:
        st = wait_for_traffic(proc)
        # A live run of another owner (this test process) must survive the clean as well.
        with Dumbbell(DumbbellConfig(hosts=1, rtt_ms=[1.0]), "delayline") as live:
            proc.kill()
            proc.wait(timeout=10)
            assert all(netns.exists(n) for n in st["namespaces"]), "SIGKILL cannot have cleaned up"
            res = bufsize("clean")
            assert res.returncode == 0, res.stderr
            assert "namespace" in res.stdout
            assert_all_gone(st)
            assert all(netns.exists(n) for n in live.namespaces), "clean removed a live run"
            assert live.delayline.alive()
        assert netns.exists(foreign), "clean removed a namespace the toolkit did not create"
        assert sysctl.read("net.core.netdev_max_backlog") == backlog
        assert bufsize("clean").stdout.strip() == "nothing to clean"
    finally:
        if proc.poll() is None:
            proc.kill()
        subprocess.run(["ip", "netns", "delete", foreign], check=False)


def test_clean_removes_orphaned_namespaces_by_prefix(no_leftovers):
    name = f"{netns.PREFIX}orphan{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    sleeper = subprocess.Popen(netns.in_ns(name, ["sleep", "60"]))
    try:
        res = bufsize("clean")
        assert res.returncode == 0
        assert name not in ours()
        assert sleeper.wait(timeout=5) != 0
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
        subprocess.run(["ip", "netns", "delete", name], check=False, capture_output=True)


def test_clean_removes_trace_instances_of_dead_processes_only(no_leftovers):
    from topologies.machine import tracefs_root

    root = tracefs_root()
    assert root is not None, "tracefs is needed by the fidelity and cwnd monitors"
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = os.path.join(root, "instances", f"bsz-cwnd-{dead.pid}")
    alive = os.path.join(root, "instances", f"bsz-cwnd-{os.getpid()}")
    os.mkdir(stale)
    os.mkdir(alive)
    try:
        res = bufsize("clean")
        assert res.returncode == 0, res.stderr
        assert f"trace instance bsz-cwnd-{dead.pid}" in res.stdout
        assert not os.path.exists(stale) and os.path.exists(alive)
    finally:
        for d in (stale, alive):
            if os.path.exists(d):
                os.rmdir(d)
