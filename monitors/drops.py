"""Drops everywhere on the path: every interface and qdisc in every namespace of a run, and the delay line.

Snapshots are taken over netlink (one socket per namespace, opened and closed per snapshot, so 400
hosts cost no standing file descriptors). The difference between start() and stop() is split into
the bottleneck buffer's drops (the only place a loss should happen; the bottleneck says which
counters are its own) and everything else, which a trustworthy run keeps at zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bufsize.monitors.base import Monitor
from bufsize.topologies import netns
from bufsize.topologies.dumbbell import Dumbbell


def _short(ns: str) -> str:
    return ns.rsplit("-", 1)[-1]


def namespace_drops(ns: str) -> dict[str, int]:
    """Drop counters of every interface and qdisc in `ns`, keyed 'ns/dev/what'."""
    out: dict[str, int] = {}
    ipr = netns.iproute(ns)
    try:
        names = {}
        for link in ipr.get_links():
            dev = link.get_attr("IFLA_IFNAME")
            names[link["index"]] = dev
            s = link.get_attr("IFLA_STATS64") or {}
            out[f"{_short(ns)}/{dev}/rx_dropped"] = s.get("rx_dropped", 0)
            out[f"{_short(ns)}/{dev}/tx_dropped"] = s.get("tx_dropped", 0)
        for q in ipr.get_qdiscs():
            stats = q.get_attr("TCA_STATS") or {}
            dev = names.get(q["index"], str(q["index"]))
            kind = q.get_attr("TCA_KIND")
            out[f"{_short(ns)}/{dev}/qdisc {kind} {q['handle'] >> 16:x}:"] = stats.get("drop", 0)
    finally:
        ipr.close()
    return out


@dataclass
class DropSnapshot:
    counters: dict[str, int]
    delayline: dict[str, int]  # the delay line's loss counters by direction and kind
    bottleneck: int  # the buffer's own drops (a qdisc counter, or the line shaper's)


@dataclass
class DropSummary:
    bottleneck: int  # drops by the buffer under study
    outside: dict[str, int] = field(default_factory=dict)  # anything else that dropped, by counter

    @property
    def outside_total(self) -> int:
        return sum(self.outside.values())

    def to_dict(self) -> dict:
        return {
            "bottleneck_buffer": self.bottleneck,
            "outside_bottleneck_total": self.outside_total,
            "outside_bottleneck": self.outside,
        }


class DropMonitor(Monitor[DropSummary]):
    """Drops between start() and stop(), split into the bottleneck buffer's and everyone else's."""

    def __init__(self, net: Dumbbell) -> None:
        self.net = net

    def snapshot(self) -> DropSnapshot:
        counters: dict[str, int] = {}
        for ns in self.net.namespaces:
            counters.update(namespace_drops(ns))
        delayline = self.net.delayline.drop_counts() if self.net.delayline else {}
        return DropSnapshot(counters, delayline, self.net.bottleneck.leaf_drops())

    def _begin(self) -> None:
        self.first = self.snapshot()

    def _end(self) -> DropSummary:
        return self.difference(self.first, self.snapshot())

    def difference(self, a: DropSnapshot, b: DropSnapshot) -> DropSummary:
        bn = self.net.bottleneck
        prefix = f"{_short(bn.ns)}/{bn.dev}/"
        own = {prefix + label for label in bn.own_drop_labels()}
        outside: dict[str, int] = {}
        for key, v in b.counters.items():
            d = v - a.counters.get(key, 0)
            if d and key not in own:
                outside[key] = d
        for key, v in b.delayline.items():
            if v - a.delayline.get(key, 0):
                outside[f"delay line {key}"] = v - a.delayline.get(key, 0)
        return DropSummary(b.bottleneck - a.bottleneck, outside)
