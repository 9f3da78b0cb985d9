"""A bare wire through the delay line, for testing and benchmarking it alone (like a Mahimahi shell).

[a] e0 ─── da [d: bsz-delayline] db ─── e0 [b]
10.9.0.1, 10.9.0.3                       10.9.0.2
"""

from __future__ import annotations

import json
from pathlib import Path

from bufsize.topologies import netns
from bufsize.topologies.cleanup import teardown
from bufsize.topologies.delay import HELPER
from bufsize.topologies.ledger import RunState
from bufsize.topologies.proc import run


class Wire:
    def __init__(self, tag: str = "wire") -> None:
        self.state = RunState.create()
        base = f"{self.state.ns_prefix}{tag}-"
        self.a, self.d, self.b = base + "a", base + "d", base + "b"

    def __enter__(self) -> Wire:
        if not HELPER.exists():
            run(["make", "-C", str(HELPER.parent)])
        self.state.add_namespaces([self.a, self.d, self.b])
        netns.add_many([self.a, self.d, self.b])
        try:
            run(
                ["ip", "-batch", "-"],
                input=(
                    f"link add name e0 netns {self.a} type veth peer name da netns {self.d}\n"
                    f"link add name db netns {self.d} type veth peer name e0 netns {self.b}\n"
                ),
            )
            for ns, dev in [(self.a, "e0"), (self.d, "da"), (self.d, "db"), (self.b, "e0")]:
                run(netns.in_ns(ns, ["ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off", "tx", "off"]))
                run(["ip", "-n", ns, "link", "set", dev, "up"])
                run(netns.in_ns(ns, ["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"]))
            run(["ip", "-n", self.a, "addr", "add", "10.9.0.1/24", "dev", "e0"])
            run(["ip", "-n", self.a, "addr", "add", "10.9.0.3/24", "dev", "e0"])
            run(["ip", "-n", self.b, "addr", "add", "10.9.0.2/24", "dev", "e0"])
            self._static_neighbours()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _static_neighbours(self) -> None:
        """Without ARP in the way, a sender's first frames are not held (or dropped) unresolved."""
        mac = {
            ns: json.loads(run(["ip", "-n", ns, "-j", "link", "show", "e0"]).stdout)[0]["address"]
            for ns in (self.a, self.b)
        }
        for ip in ("10.9.0.1", "10.9.0.3"):
            run(["ip", "-n", self.b, "neigh", "replace", ip, "lladdr", mac[self.a], "dev", "e0", "nud", "permanent"])
        run(
            ["ip", "-n", self.a, "neigh", "replace", "10.9.0.2", "lladdr", mac[self.b], "dev", "e0", "nud", "permanent"]
        )

    def __exit__(self, *exc: object) -> None:
        # The ledger's teardown stops what runs inside these namespaces (only this wire's) and deletes them.
        teardown(self.state)

    def delayline_argv(self, stats: Path, *args: str) -> list[str]:
        return netns.in_ns(self.d, [str(HELPER), "-a", "da", "-b", "db", "-s", str(stats), *args])
