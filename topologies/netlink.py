"""A NETLINK_ROUTE socket made inside a namespace, for one-request-one-answer reads of kernel stats.

The monitors read counters many times a second; a request for exactly one object, decoded with
struct, costs about 10 us and, being a plain system call, cannot be left half-done by a signal.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import time

from bufsize.topologies import netns
from bufsize.topologies.errors import RunError

NLMSG_ERROR = 2
NLM_F_REQUEST = 1
NLMSG = struct.Struct("=IHHII")  # len, type, flags, seq, pid
NLA = struct.Struct("=HH")  # len, type
# An answer normally takes about 10 us. Requests that take the rtnl lock wait while another
# process holds it (deleting hundreds of namespaces can, for seconds), so a slow answer is waited
# for; one that does not come in this long means the kernel or this process is stuck.
STALL_S = 10.0
RECV_TIMEOUT_S = 1.0


def attrs(buf: bytes, start: int, end: int) -> dict[int, tuple[int, int]]:
    """Netlink attributes in buf[start:end] as type -> (payload start, payload end)."""
    out = {}
    while start + NLA.size <= end:
        length, kind = NLA.unpack_from(buf, start)
        if length < NLA.size:
            break
        out[kind & 0x3FFF] = (start + NLA.size, start + length)
        start += (length + 3) & ~3
    return out


def check_answer(buf: bytes, expected: int, what: str) -> int:
    """The message's length if it is of the expected type; OSError for a netlink error or anything else."""
    length, kind, _flags, _seq, _pid = NLMSG.unpack_from(buf, 0)
    if kind == NLMSG_ERROR:
        err = -struct.unpack_from("=i", buf, NLMSG.size)[0]
        raise OSError(err, f"{what}: {os.strerror(err)}")
    if kind != expected:
        raise OSError(f"{what}: unexpected netlink message type {kind}")
    return length


class RouteSocket:
    """NETLINK_ROUTE socket bound in namespace `ns`, with the index of its interface `dev`."""

    def __init__(self, ns: str, dev: str) -> None:
        with netns.entered(ns):
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
            try:
                self.ifindex = socket.if_nametoindex(dev)
            except OSError:
                self.sock.close()
                raise LookupError(f"no interface {dev} in {ns}") from None
        self.sock.bind((0, 0))
        self.sock.settimeout(RECV_TIMEOUT_S)
        self.ns, self.dev = ns, dev
        self.stall_s = STALL_S
        self.seq = 0

    def ask(self, msg_type: int, flags: int, body: bytes) -> tuple[bytes, float]:
        """Send one request; its answer and the monotonic time it arrived.

        RunError, naming the device, if the kernel answers with an error (the device is gone) or
        not at all within `stall_s`: a monitor or a sample must not hang, nor end in a traceback.
        """
        self.seq += 1
        where = f"{self.dev} in {self.ns}"
        try:
            self.sock.send(NLMSG.pack(NLMSG.size + len(body), msg_type, flags, self.seq, 0) + body)
            deadline = time.monotonic() + self.stall_s
            while True:
                try:
                    buf = self.sock.recv(65536)
                except TimeoutError:
                    if time.monotonic() >= deadline:
                        raise RunError(
                            f"netlink stalled: no answer about {where} within {self.stall_s:.0f} s "
                            "(the kernel's rtnl lock held elsewhere, or this process starved)"
                        ) from None
                    continue
                t = time.monotonic()
                _len, kind, _flags, seq, _pid = NLMSG.unpack_from(buf, 0)
                if seq != self.seq:  # skip a late answer to an earlier request
                    continue
                if kind == NLMSG_ERROR:
                    err = -struct.unpack_from("=i", buf, NLMSG.size)[0]
                    if err:
                        gone = " (the device is gone)" if err in (errno.ENODEV, errno.EINVAL, errno.ENOENT) else ""
                        raise RunError(f"netlink request about {where} failed: {os.strerror(err)}{gone}")
                return buf, t
        except OSError as e:
            raise RunError(f"netlink request about {where} failed: {e.strerror or e}") from e

    def close(self) -> None:
        self.sock.close()
