"""`bufsize clean` never signals the host's processes, and signals a run's only while they are
still what was checked (issue 32). Real namespaces and processes; stop_process is replaced by a
recorder where a mistake would otherwise signal the whole host."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from bufsize.topologies import cleanup, netns
from bufsize.topologies.proc import net_ns_id, start_time, stop_process


@pytest.mark.integration
def test_a_toolkit_name_on_the_host_namespace_gets_no_process_signalled(root, monkeypatch) -> None:
    name = f"{netns.PREFIX}hosttest{os.getpid()}-x"
    calls: list[tuple] = []
    monkeypatch.setattr(cleanup, "stop_process", lambda *a, **k: calls.append(a) or True)
    # The namespace this test runs in is the host's (init's is not readable in every container).
    subprocess.run(["ip", "netns", "attach", name, str(os.getpid())], check=True)
    try:
        assert net_ns_id(os.getpid()) == (os.stat(netns.ns_path(name)).st_dev, os.stat(netns.ns_path(name)).st_ino)
        assert len(netns.pids_in(name)) > 2  # what the old code would have signalled: every host process
        refused: list[str] = []
        removed = cleanup.remove_namespace(name, refused)
        assert calls == []
        assert removed == [f"namespace {name}"]
        assert refused and "host's own network namespace" in refused[0]
        assert not netns.exists(name)
    finally:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)


@pytest.mark.integration
def test_stop_process_checks_the_namespace_before_signalling(root) -> None:
    name = f"{netns.PREFIX}stoptest{os.getpid()}-x"
    netns.add_many([name])
    p = subprocess.Popen(["ip", "netns", "exec", name, "sleep", "60"])
    try:
        deadline = time.monotonic() + 10
        ns = os.stat(netns.ns_path(name))
        while net_ns_id(p.pid) != (ns.st_dev, ns.st_ino):  # `ip netns exec` has switched and exec'd
            assert time.monotonic() < deadline
            time.sleep(0.05)
        started = start_time(p.pid)
        assert not stop_process(p.pid, started, netns=net_ns_id(os.getpid()))  # not in that namespace: left alone
        assert p.poll() is None
        assert not stop_process(p.pid, (started or 0) + 1)  # another process than the one recorded
        assert p.poll() is None
        assert stop_process(p.pid, started, grace=2.0, netns=(ns.st_dev, ns.st_ino))
        assert p.wait(timeout=5) is not None
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        netns.delete(name)
