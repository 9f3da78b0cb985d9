"""Network namespaces: naming, entering, and netlink sockets bound inside them."""

from __future__ import annotations

import ctypes
import os
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from bufsize.topologies.proc import run

NETNS_DIR = "/run/netns"
# Every namespace the toolkit creates starts with this prefix; `bufsize clean` relies on it.
PREFIX = "bsz-"


def ns_path(name: str) -> str:
    return os.path.join(NETNS_DIR, name)


def in_ns(name: str, argv: Sequence[str]) -> list[str]:
    """Argument list that runs argv inside namespace `name`.

    nsenter only switches the network namespace and then execs, so the PID we get back is the
    program's own (unlike a shell wrapper) and no mount namespace is set up per call.
    """
    return ["nsenter", f"--net={ns_path(name)}", "--", *argv]


def exists(name: str) -> bool:
    return os.path.exists(ns_path(name))


def list_ns() -> list[str]:
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


def pids_in(name: str) -> list[int]:
    """PIDs of processes whose network namespace is `name` (ours by construction)."""
    res = run(["ip", "netns", "pids", name], check=False)
    return [int(p) for p in res.stdout.split()]


def add_many(names: Sequence[str]) -> None:
    if names:
        run(["ip", "-batch", "-"], input="".join(f"netns add {n}\n" for n in names), timeout=120)


def delete(name: str) -> None:
    run(["ip", "netns", "delete", name], check=False)


CLONE_NEWNET = 0x40000000
_libc: ctypes.CDLL | None = None


def setns_fd(fd: int, what: str) -> None:
    """Move the calling thread into the network namespace open as `fd` (Python 3.11 has no
    os.setns). Never creates a namespace: pyroute2's setns() does, given a name that is gone."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns into {what}: {os.strerror(err)}")


@contextmanager
def entered(name: str) -> Iterator[None]:
    """Switch the calling thread into namespace `name` for the duration of the block.

    Sockets created inside (netlink, ioctl) stay bound to that namespace after we switch back,
    which is how monitors read a namespace's counters without forking a process per sample.

    The way back is this thread's own namespace, held open here. pyroute2's pushns()/popns() keep
    one stack for the whole process and save the main thread's namespace (/proc/self), so two
    threads entering at once could leave either thread, or the main one, in a host's namespace
    (reproduced in tests/test_netns_threads.py).
    """
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        target = os.open(ns_path(name), os.O_RDONLY | os.O_CLOEXEC)
        try:
            setns_fd(target, name)
        finally:
            os.close(target)
        try:
            yield
        finally:
            setns_fd(home, "this thread's own namespace")
    finally:
        os.close(home)


def iproute(name: str):
    """A pyroute2 IPRoute whose netlink socket lives in namespace `name`."""
    from pyroute2 import IPRoute

    with entered(name):
        return IPRoute()


class NamespaceSockets:
    """Sockets in named namespaces, made from one thread of one process: setns() into the
    namespace, socket(), setns() back. A socket keeps the namespace it was made in, so one
    event loop can serve transfers from hundreds of hosts without a process per host."""

    def __init__(self) -> None:
        self.home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        self.fds: dict[str, int] = {}

    def socket(
        self, name: str, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM, proto: int = 0
    ) -> socket.socket:
        fd = self.fds.get(name)
        if fd is None:
            fd = self.fds[name] = os.open(ns_path(name), os.O_RDONLY | os.O_CLOEXEC)
        setns_fd(fd, name)
        try:
            return socket.socket(family, kind, proto)
        finally:
            setns_fd(self.home, "this thread's own namespace")

    def close(self) -> None:
        for fd in [self.home, *self.fds.values()]:
            os.close(fd)
        self.fds = {}
