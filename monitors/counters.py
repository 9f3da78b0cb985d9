"""Interface byte/packet counters over netlink, read from inside the interface's namespace."""

from __future__ import annotations

import time
from dataclasses import dataclass

from buffersizing import netns


@dataclass(frozen=True)
class CounterSample:
    t: float  # time.monotonic()
    tx_bytes: int
    tx_packets: int
    tx_dropped: int
    rx_bytes: int
    rx_dropped: int


class InterfaceCounters:
    """One netlink socket bound in `ns`; each read() is one RTM_GETLINK round trip."""

    def __init__(self, ns: str, dev: str) -> None:
        self.ipr = netns.iproute(ns)
        found = self.ipr.link_lookup(ifname=dev)
        if not found:
            self.ipr.close()
            raise LookupError(f"no interface {dev} in {ns}")
        self.index = found[0]

    def read(self) -> CounterSample:
        msg = self.ipr.get_links(self.index)[0]
        t = time.monotonic()
        s = msg.get_attr("IFLA_STATS64")
        return CounterSample(t, s["tx_bytes"], s["tx_packets"], s["tx_dropped"], s["rx_bytes"], s["rx_dropped"])

    def close(self) -> None:
        self.ipr.close()


def rate_mbps(a: CounterSample, b: CounterSample) -> float:
    """Mean transmit rate between two samples, in Mb/s of Ethernet frames (what the shaper counts)."""
    return (b.tx_bytes - a.tx_bytes) * 8 / (b.t - a.t) / 1e6
