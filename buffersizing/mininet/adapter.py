"""A running dumbbell seen through Mininet's API: nodes, interfaces, links, `cmd`, `popen` and its CLI.

Mininet makes its own unnamed namespaces and, on cleanup, kills by name pattern; here every node is
one of the toolkit's named namespaces, whose shell is started with `ip netns exec`, and the dumbbell
keeps ownership: the adapter's stop() ends only the shells it started (by their process group), and
the namespaces, qdiscs and delay line go with the Dumbbell's own teardown. Mininet is optional: it
is imported here only, when a view is made.

Names, as in the 2012 scripts: h1..hN (senders), s1 (the switch and router, whose port toward the
receiver is the bottleneck), r1 (the receiver) and, with the delay line, d1 (its namespace).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bufsize.topologies.description import (
    PREFIX_LEN,
    RECEIVER_MAC,
    SWITCH_LAN_IP,
    SWITCH_LAN_MAC,
    SWITCH_WAN_MAC,
)
from bufsize.topologies.errors import MachineError

if TYPE_CHECKING:
    from bufsize.topologies.dumbbell import Dumbbell


def import_mininet() -> Any:
    """The mininet package with the modules the adapter and `bufsize shell` use; MachineError if missing."""
    try:
        import mininet.cli
        import mininet.link
        import mininet.log
        import mininet.net
        import mininet.node
    except ImportError as e:
        raise MachineError(f"Mininet is not importable ({e}): run ./setup.sh, which installs and links it") from e
    return mininet


def make_view(net: Dumbbell) -> Any:
    """A mininet.net.Mininet whose nodes are `net`'s namespaces; stop() it before `net` is torn down."""
    # One function of over 80 lines because its classes subclass Mininet's, which exist only once
    # Mininet is imported (an optional package, imported here and nowhere earlier), and close over `net`.
    mn = import_mininet()

    class NamespaceNode(mn.node.Node):
        """A Mininet node whose shell runs in an existing named namespace (never a new one)."""

        def __init__(self, name: str, ns: str, **params: Any) -> None:
            self.ns_name = ns
            self._starting = False
            super().__init__(name, inNamespace=True, **params)

        def startShell(self, mnopts: str | None = None) -> None:  # noqa: N802 (Mininet's name)
            # Mininet adds "n" (unshare a new namespace) when inNamespace; the shell must instead
            # enter this node's namespace, so "-cd" (close fds, new session) and `ip netns exec`.
            self._starting, self.inNamespace = True, False
            try:
                super().startShell(mnopts="-cd")
            finally:
                self._starting, self.inNamespace = False, True
            net.state.add_process(self.pid, f"Mininet shell of {self.name}")

        def _popen(self, cmd: list[str], **params: Any) -> Any:
            if self._starting:
                cmd = [*cmd[:2], "ip", "netns", "exec", self.ns_name, *cmd[2:]]
            return super()._popen(cmd, **params)

        def terminate(self) -> None:
            pid = self.pid
            super().terminate()  # SIGHUP to the shell's process group, which holds its jobs
            if pid:
                net.state.forget_process(pid)

    class NamespaceHost(NamespaceNode, mn.node.Host):
        pass

    class NamespaceSwitch(NamespaceNode):
        """s1 (a Linux bridge and router) or d1 (the delay line): configured by the dumbbell, so
        nothing to start or stop but the shell."""

        def start(self, controllers: list) -> None:
            pass

        def connected(self) -> bool:
            return True

    class ExistingIntf(mn.link.Intf):
        """An interface the dumbbell made: registered with its node, never moved or reconfigured."""

        def __init__(self, name: str, node: Any, ip: str | None = None, mac: str | None = None) -> None:
            super().__init__(name, node=node, moveIntfFn=lambda *a, **k: True)
            self.ip, self.mac = ip, mac
            self.prefixLen = PREFIX_LEN if ip else None

        def config(self, **params: Any) -> dict:
            return {}

    class DumbbellMininet(mn.net.Mininet):
        """Mininet's network object over a built dumbbell. Not built by Mininet, so build(),
        start() and Mininet's cleanup are never used; stop() ends only the adapter's shells."""

        inited = True  # skips Mininet.init(), which raises global limits and sysctls

        def __init__(self) -> None:
            super().__init__(topo=None, build=False)
            self.dumbbell = net
            self.built = True

        def stop(self) -> None:
            for node in self.nameToNode.values():
                node.stop(deleteIntfs=False)

        def __enter__(self) -> DumbbellMininet:
            return self

        def __exit__(self, *exc: object) -> None:
            self.stop()

    view = DumbbellMininet()
    plan = net.plan

    def link(a: Any, b: Any) -> None:
        ln = mn.link.Link.__new__(mn.link.Link)  # a record of a veth the dumbbell made
        ln.intf1, ln.intf2 = a, b
        a.link = b.link = ln
        view.links.append(ln)

    started: list[Any] = []
    try:
        s1 = NamespaceSwitch("s1", net.switch_ns)
        started.append(s1)
        view.switches.append(s1)
        view.nameToNode["s1"] = s1
        r1 = NamespaceHost("r1", net.receiver_ns)
        started.append(r1)
        r1_if = ExistingIntf(net.receiver_dev, r1, plan.receiver_ip, RECEIVER_MAC)
        for h in net.hosts:
            node = NamespaceHost(f"h{h.index}", h.ns)
            started.append(node)
            view.hosts.append(node)
            view.nameToNode[node.name] = node
            link(ExistingIntf(h.dev, node, h.ip, h.mac), ExistingIntf(h.switch_port, s1, None, SWITCH_LAN_MAC))
        view.hosts.append(r1)
        view.nameToNode["r1"] = r1
        s1_wan = ExistingIntf(plan.bottleneck_dev, s1, None, SWITCH_WAN_MAC)
        ExistingIntf("br0", s1, SWITCH_LAN_IP, SWITCH_LAN_MAC)
        if net.delay_ns:
            d1 = NamespaceSwitch("d1", net.delay_ns)  # forwards (after a delay), so listed as a switch
            started.append(d1)
            view.switches.append(d1)
            view.nameToNode["d1"] = d1
            link(s1_wan, ExistingIntf(plan.delay_devs[0], d1))
            link(ExistingIntf(plan.delay_devs[1], d1), r1_if)
        else:
            link(s1_wan, r1_if)
    except BaseException:
        for node in started:
            node.stop(deleteIntfs=False)
        raise
    return view
