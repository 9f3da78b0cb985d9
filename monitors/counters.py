"""Interface byte/packet counters over netlink, read from inside the interface's namespace.

One RTM_GETLINK request for one interface on a plain NETLINK_ROUTE socket, decoded with struct
(IFLA_STATS64). Not pyroute2: its requests run an asyncio loop, and a Ctrl-C or SIGTERM that
lands inside one left the socket unable to close, so a signalled run could hang in teardown.
A plain recv() is one system call: the signal's exception is raised after it returns.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from dataclasses import dataclass

from buffersizing import netns

RTM_NEWLINK = 16
RTM_GETLINK = 18
NLMSG_ERROR = 2
NLM_F_REQUEST = 1
IFLA_STATS64 = 23
NLMSG = struct.Struct("=IHHII")
IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
NLA = struct.Struct("=HH")
STATS64 = struct.Struct("=8Q")  # rx/tx packets, rx/tx bytes, rx/tx errors, rx/tx dropped


@dataclass(frozen=True)
class CounterSample:
    t: float  # time.monotonic()
    tx_bytes: int
    tx_packets: int
    tx_dropped: int
    rx_bytes: int
    rx_dropped: int


def decode_link(buf: bytes, t: float) -> CounterSample:
    length, kind, _flags, _seq, _pid = NLMSG.unpack_from(buf, 0)
    if kind == NLMSG_ERROR:
        err = -struct.unpack_from("=i", buf, NLMSG.size)[0]
        raise OSError(err, f"RTM_GETLINK: {os.strerror(err)}")
    if kind != RTM_NEWLINK:
        raise OSError(f"unexpected netlink message type {kind}")
    pos = NLMSG.size + IFINFOMSG.size
    while pos + NLA.size <= length:
        alen, akind = NLA.unpack_from(buf, pos)
        if alen < NLA.size:
            break
        if akind & 0x3FFF == IFLA_STATS64:
            rxp, txp, rxb, txb, _rxe, _txe, rxd, txd = STATS64.unpack_from(buf, pos + NLA.size)
            return CounterSample(t, txb, txp, txd, rxb, rxd)
        pos += (alen + 3) & ~3
    raise OSError("link answer without IFLA_STATS64")


class InterfaceCounters:
    """One netlink socket made in `ns`; each read() is one RTM_GETLINK round trip for `dev`."""

    def __init__(self, ns: str, dev: str) -> None:
        with netns.entered(ns):
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
            try:
                self.index = socket.if_nametoindex(dev)
            except OSError:
                self.sock.close()
                raise LookupError(f"no interface {dev} in {ns}") from None
        self.sock.bind((0, 0))
        self.sock.settimeout(2.0)
        self.seq = 0
        self.body = IFINFOMSG.pack(socket.AF_UNSPEC, 0, self.index, 0, 0)

    def read(self) -> CounterSample:
        self.seq += 1
        head = NLMSG.pack(NLMSG.size + len(self.body), RTM_GETLINK, NLM_F_REQUEST, self.seq, 0)
        self.sock.send(head + self.body)
        while True:
            buf = self.sock.recv(65536)
            t = time.monotonic()
            if NLMSG.unpack_from(buf, 0)[3] == self.seq:  # skip a late answer to an earlier request
                return decode_link(buf, t)

    def close(self) -> None:
        self.sock.close()


def rate_mbps(a: CounterSample, b: CounterSample) -> float:
    """Mean transmit rate between two samples, in Mb/s of Ethernet frames (what the shaper counts)."""
    return (b.tx_bytes - a.tx_bytes) * 8 / (b.t - a.t) / 1e6
