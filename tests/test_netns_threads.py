"""netns.entered() from several threads at once: each thread returns to its own namespace.

The monitors open their netlink sockets in hosts' namespaces from inside this process, and a run has
more than one thread (the recorder's, the main one reading the senders' counters). A process-wide
stack of saved namespaces, as pyroute2's pushns()/popns() keep, hands one thread's way back to
another; the same exercise with them left the main thread and both workers in a host's namespace.
"""

from __future__ import annotations

import os
import threading

import pytest

from bufsize.topologies import netns

ROUNDS = 2000


def here() -> int:
    return os.stat("/proc/thread-self/ns/net").st_ino


@pytest.fixture
def two_namespaces(root):
    names = [f"{netns.PREFIX}thr-{os.getpid()}-{i}" for i in range(2)]
    netns.add_many(names)
    try:
        yield names
    finally:
        for n in names:
            netns.delete(n)


def test_threads_entering_at_once_each_come_back_home(two_namespaces):
    home = here()
    inside = {n: os.stat(netns.ns_path(n)).st_ino for n in two_namespaces}
    wrong: list[str] = []

    def enter_often(name: str) -> None:
        for _ in range(ROUNDS):
            with netns.entered(name):
                if here() != inside[name]:
                    wrong.append(f"{threading.current_thread().name} not in {name} inside the block")
        if here() != home:
            wrong.append(f"{threading.current_thread().name} left in another namespace")

    workers = [threading.Thread(target=enter_often, args=(n,), name=f"worker-{n}") for n in two_namespaces]
    for w in workers:
        w.start()
    enter_often(two_namespaces[0])
    for w in workers:
        w.join()
    assert not wrong, sorted(set(wrong))
    assert here() == home


def test_a_missing_namespace_is_refused_not_made(root):
    name = f"{netns.PREFIX}thr-missing-{os.getpid()}"
    home = here()
    with pytest.raises(FileNotFoundError), netns.entered(name):
        pass
    assert not netns.exists(name), "entering a missing namespace created it"
    assert here() == home
