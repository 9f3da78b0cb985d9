"""Interface byte/packet counters, read over netlink from inside the interface's namespace.

One RTM_GETLINK request for one interface (monitors/netlink.py), decoded with struct
(IFLA_STATS64). Not pyroute2: its requests run an asyncio loop, and a Ctrl-C or SIGTERM landing
inside one could leave the socket unable to close, so a signalled run could hang in teardown.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from bufsize.topologies.netlink import NLM_F_REQUEST, NLMSG, RouteSocket, attrs, check_answer

RTM_NEWLINK = 16
RTM_GETLINK = 18
IFLA_STATS64 = 23
IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
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
    length = check_answer(buf, RTM_NEWLINK, "RTM_GETLINK")
    found = attrs(buf, NLMSG.size + IFINFOMSG.size, length)
    if IFLA_STATS64 not in found:
        raise OSError("link answer without IFLA_STATS64")
    rxp, txp, rxb, txb, _rxe, _txe, rxd, txd = STATS64.unpack_from(buf, found[IFLA_STATS64][0])
    return CounterSample(t, txb, txp, txd, rxb, rxd)


class InterfaceCounters:
    """Each read() is one RTM_GETLINK round trip for `dev` in namespace `ns`."""

    def __init__(self, ns: str, dev: str) -> None:
        self.nl = RouteSocket(ns, dev)
        self.index = self.nl.ifindex
        self.body = IFINFOMSG.pack(socket.AF_UNSPEC, 0, self.index, 0, 0)

    def read(self) -> CounterSample:
        return decode_link(*self.nl.ask(RTM_GETLINK, NLM_F_REQUEST, self.body))

    def close(self) -> None:
        self.nl.close()

    def __enter__(self) -> InterfaceCounters:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def rate_mbps(a: CounterSample, b: CounterSample) -> float:
    """Mean transmit rate between two samples, in Mb/s of Ethernet frames (what the shaper counts)."""
    return (b.tx_bytes - a.tx_bytes) * 8 / (b.t - a.t) / 1e6
