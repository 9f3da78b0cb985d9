"""A NETLINK_ROUTE socket made inside a namespace, for one-request-one-answer reads of kernel stats.

The monitors read counters many times a second; a request for exactly one object, decoded with
struct, costs about 10 us and, being a plain system call, cannot be left half-done by a signal.
"""

from __future__ import annotations

import os
import socket
import struct
import time

from topologies import netns

NLMSG_ERROR = 2
NLM_F_REQUEST = 1
NLMSG = struct.Struct("=IHHII")  # len, type, flags, seq, pid
NLA = struct.Struct("=HH")  # len, type


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
        self.sock.settimeout(2.0)
        self.seq = 0

    def ask(self, msg_type: int, flags: int, body: bytes) -> tuple[bytes, float]:
        """Send one request; its answer and the monotonic time it arrived."""
        self.seq += 1
        self.sock.send(NLMSG.pack(NLMSG.size + len(body), msg_type, flags, self.seq, 0) + body)
        while True:
            buf = self.sock.recv(65536)
            t = time.monotonic()
            if NLMSG.unpack_from(buf, 0)[3] == self.seq:  # skip a late answer to an earlier request
                return buf, t

    def close(self) -> None:
        self.sock.close()
