"""Drops everywhere on the path: every interface and qdisc in every namespace of a run, and the delay line.

Snapshots are taken over netlink (one socket per namespace, opened and closed per snapshot, so 400
hosts cost no standing file descriptors). The difference between two snapshots is split into the
bottleneck buffer's drops (the bfifo leaf on the bottleneck port: the only place a loss should
happen) and everything else, which a trustworthy run keeps at zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from buffersizing import netns
from topologies import shaper
from topologies.dumbbell import BOTTLENECK_DEV, Dumbbell

LEAF_HANDLE = int(shaper.LEAF.rstrip(":"), 16) << 16


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
    delayline: int


def snapshot(net: Dumbbell) -> DropSnapshot:
    counters: dict[str, int] = {}
    for ns in net.namespaces:
        counters.update(namespace_drops(ns))
    return DropSnapshot(counters, net.delayline.drops() if net.delayline else 0)


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


def difference(net: Dumbbell, a: DropSnapshot, b: DropSnapshot) -> DropSummary:
    sw = _short(net.switch_ns)
    leaf = f"{sw}/{BOTTLENECK_DEV}/qdisc bfifo {LEAF_HANDLE >> 16:x}:"
    root = f"{sw}/{BOTTLENECK_DEV}/qdisc {net.cfg.shaper} 1:"
    outside: dict[str, int] = {}
    for key, v in b.counters.items():
        d = v - a.counters.get(key, 0)
        # The shaper's root counts its child's drops again; those are the bottleneck's, not extra.
        if d and key not in (leaf, root):
            outside[key] = d
    if b.delayline - a.delayline:
        outside["delay line"] = b.delayline - a.delayline
    return DropSummary(b.counters.get(leaf, 0) - a.counters.get(leaf, 0), outside)
