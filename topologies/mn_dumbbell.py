"""The dumbbell as a Mininet Topo, for Mininet's own tools and scripts.

    mn --custom topologies/mn_dumbbell.py --topo dumbbell,2,87 --controller none
    mn --custom topologies/mn_dumbbell.py --topo dumbbell,hosts=10,rtt_ms=20,rate_mbps=10,buffer_packets=30 \
       --controller none

Arguments of `dumbbell`: hosts, rtt_ms (each sender's RTT to r1), rate_mbps (bottleneck), buffer_packets
(bfifo limit; default one bandwidth-delay product), shaper (htb or tbf), l2switch (1: the senders'
LAN is Mininet's switch, Open vSwitch by default, with the router g1 behind it). Mininet builds and owns
these nodes (its own namespaces and cleanup); `bufsize shell` is the same dumbbell built and
measured by the toolkit, with the delay line where the kernel has no netem.

Link classes a user's own Topo can use:
- BottleneckLink(bw=Mb/s, max_queue_size=packets or buffer_bytes=B, shaper='htb'): on node1's egress
  the toolkit's shaper with its bfifo child (the same tc tree as the dumbbell's; no netem needed).
  It carries no delay: propagation delay belongs on the access links, so the queue under study is
  the only one on the bottleneck egress.
- AccessLink(delay='43.5ms'): netem on both ends, as Mininet's TCLink does (RTT = 2 x delay per
  link crossed). On a kernel without netem it is refused with one line, never silently ignored
  (Mininet's TCLink logs an error and runs with no delay).
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any, NoReturn

# `mn --custom` execs this file without __file__; the code object still knows its path.
_REPO = Path(inspect.currentframe().f_code.co_filename).resolve().parent.parent  # type: ignore[union-attr]
try:
    import bufsize.topologies  # noqa: F401
except ImportError:
    # mn runs Debian's python3, where the toolkit is not installed: name the checkout's folders as
    # pyproject.toml's package-dir does (bufsize.topologies is ./topologies), without running any
    # of the top layer's code.
    import types

    _pkg = types.ModuleType("bufsize")
    _pkg.__path__ = [str(_REPO / "buffersizing"), str(_REPO)]
    sys.modules["bufsize"] = _pkg

from mininet.link import Intf, Link, TCIntf  # noqa: E402
from mininet.node import Node  # noqa: E402
from mininet.topo import Topo  # noqa: E402

from bufsize.topologies import FRAME_BYTES  # noqa: E402
from bufsize.topologies.config import MAX_HOSTS, TC_SHAPERS, default_burst_bytes  # noqa: E402
from bufsize.topologies.delay import NETEM_LIMIT  # noqa: E402
from bufsize.topologies.description import OFFLOADS_OFF  # noqa: E402
from bufsize.topologies.errors import MachineError, UsageError  # noqa: E402
from bufsize.topologies.machine import qdisc_support  # noqa: E402
from bufsize.topologies.shaper import build_commands  # noqa: E402
from bufsize.topologies.units import check_buffer_bytes, packets_to_bytes  # noqa: E402

LAN_PREFIX, ROUTER_LAN_IP = "10.1", "10.1.255.254"
WAN_ROUTER_IP, RECEIVER_IP = "10.2.0.254", "10.2.0.1"


# Loaded by `mn --custom` (exec'd, so no module name): a refusal there exits with one line instead of
# raising into mn's handler, whose cleanup kills every process named "mininet:" on the machine.
UNDER_MN = __name__ != "bufsize.topologies.mn_dumbbell"


@cache
def netem_available() -> bool:
    return qdisc_support()["netem"]


def refuse(message: str, error: type[Exception] = UsageError) -> NoReturn:
    """Every refusal of this module: one line and exit 1 under mn, else `error` for the calling script."""
    if UNDER_MN:
        raise SystemExit(f"mn --custom dumbbell: {message}")
    raise error(message)


def check_delay(where: str, delay: Any) -> float:
    ms = parse_delay_ms(delay)
    if ms > 0 and not netem_available():
        refuse(
            f"{where}: delay {delay} needs the netem qdisc, which this kernel lacks (Mininet's TCLink would run "
            "without it); `bufsize shell` builds the same dumbbell with the toolkit's delay line",
            MachineError,
        )
    return ms


def node_run(node: Node, argv: list[str], stdin: str | None = None) -> None:
    """Run argv (a list, never a shell string) in node's namespace; raise with its stderr on failure."""
    p = node.popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.communicate(stdin.encode() if stdin is not None else None)
    if p.returncode != 0:
        raise MachineError(f"{node.name}: {' '.join(argv)} failed: {err.decode().strip() or out.decode().strip()}")


def parse_delay_ms(delay: Any) -> float:
    """Mininet's delay strings ('43.5ms', '10us', '1s') or a number of ms."""
    text = str(delay).strip()
    try:
        ms = float(delay) if isinstance(delay, (int, float)) else None
        for suffix, scale in (("ms", 1.0), ("us", 1e-3), ("s", 1e3)):
            if ms is None and text.endswith(suffix):
                ms = float(text[: -len(suffix)]) * scale
        ms = float(text) if ms is None else ms
    except ValueError:
        refuse(f"delay {delay}: give ms ('43.5ms'), us or s")
    if not 0 <= ms <= 10_000:
        refuse(f"delay {delay}: must be 0 to 10 s")
    return ms


def check_bottleneck(
    where: str, bw: Any, max_queue_size: Any, buffer_bytes: Any, shaper: str, delay: Any = None
) -> int:
    """BottleneckLink's parameters (DumbbellTopo checks them before Mininet makes anything); the buffer in bytes."""
    if delay not in (None, 0, "0", "0ms"):
        refuse(
            f"{where}: delay {delay} on the bottleneck link: put propagation delay on the access links "
            "(AccessLink), so the bfifo is the only queue on the bottleneck egress"
        )
    if shaper not in TC_SHAPERS:  # no delay line under Mininet, so no line shaper
        refuse(f"shaper {shaper}: must be one of {', '.join(TC_SHAPERS)}")
    if not (isinstance(bw, (int, float)) and 0 < bw <= 100_000):
        refuse(f"bw {bw}: must be a rate in Mb/s above 0")
    if buffer_bytes is None and max_queue_size is None:
        refuse(f"{where}: give max_queue_size (packets) or buffer_bytes")
    try:
        return check_buffer_bytes(packets_to_bytes(max_queue_size) if buffer_bytes is None else buffer_bytes, "buffer")
    except (UsageError, TypeError, ValueError) as e:
        refuse(f"{where}: {e}")


class ToolkitIntf(TCIntf):
    """An interface whose offloads and qdiscs are set in config(), so they can be set again: Open vSwitch
    clears a port's root qdisc when Mininet attaches it, and Mininet then calls config() once more on
    TCIntf interfaces (OVSSwitch.TCReapply). Only the subclass is Mininet's: TCIntf's own tc tree
    (its netem/HTB from bw, delay, max_queue_size) is never built.

    delay_ms: netem delay on this egress. bottleneck: (shaper, Mb/s, buffer bytes, burst bytes) of the
    shaper tree with its bfifo child on this egress.
    """

    def config(  # type: ignore[override]
        self, delay_ms: float = 0.0, bottleneck: tuple[str, float, int, int] | None = None, **params: Any
    ) -> dict:
        r = Intf.config(self, **params)
        node_run(self.node, ["ethtool", "-K", self.name, *OFFLOADS_OFF])
        if bottleneck:
            # Built from scratch each time: nothing at first, whatever OVS left on re-application.
            self.node.popen(["tc", "qdisc", "del", "dev", self.name, "root"], stderr=subprocess.DEVNULL).wait()
            node_run(self.node, ["tc", "-batch", "-"], stdin="".join(build_commands(self.name, *bottleneck)))
        elif delay_ms > 0:
            node_run(
                self.node,
                ["tc", "qdisc", "replace", "dev", self.name, "root", "netem", "delay", f"{round(delay_ms * 1000)}us"]
                + ["limit", str(NETEM_LIMIT)],
            )
        return r


# TCLink's shaping and impairment parameters: an AccessLink carries delay only, so one of these would
# otherwise pass through to the interfaces and be dropped without a word.
TCLINK_ONLY = ("bw", "jitter", "loss", "max_queue_size", "speedup", "use_hfsc", "use_tbf", "latency_ms",
               "enable_ecn", "enable_red")  # fmt: skip


class AccessLink(Link):
    """A link with propagation delay from netem on both ends; refused where the kernel has no netem."""

    def __init__(self, node1: Node, node2: Node, delay: Any = 0, **params: Any) -> None:
        where = f"link {node1.name}-{node2.name}"
        unused = [k for k in TCLINK_ONLY if params.get(k) not in (None, False, 0)]
        if unused:
            refuse(
                f"{where}: AccessLink takes only delay, not {', '.join(unused)}; the rate and the queue limit "
                "belong to BottleneckLink (bw, max_queue_size), the only shaped egress of the dumbbell"
            )
        ms = check_delay(where, delay)
        p1, p2 = dict(params.pop("params1", None) or {}), dict(params.pop("params2", None) or {})
        p1["delay_ms"] = p2["delay_ms"] = ms
        params["intf"] = ToolkitIntf  # Mininet.addLink passes its default intf class; ours replaces it
        super().__init__(node1, node2, params1=p1, params2=p2, **params)


class BottleneckLink(Link):
    """node1's egress: shaper at bw Mb/s with a bfifo child of max_queue_size packets (or buffer_bytes)."""

    def __init__(
        self,
        node1: Node,
        node2: Node,
        bw: float = 62.5,
        max_queue_size: float | None = None,
        buffer_bytes: int | None = None,
        shaper: str = "htb",
        delay: Any = None,
        **params: Any,
    ) -> None:
        where = f"link {node1.name}-{node2.name}"
        buffer_bytes = check_bottleneck(where, bw, max_queue_size, buffer_bytes, shaper, delay)
        self.rate_mbps, self.buffer_bytes, self.shaper = bw, buffer_bytes, shaper
        p1 = dict(params.pop("params1", None) or {})
        p1["bottleneck"] = (shaper, bw, buffer_bytes, default_burst_bytes(shaper, bw))
        params["intf"] = ToolkitIntf
        super().__init__(node1, node2, params1=p1, **params)


class DumbbellRouter(Node):
    """s1: a bridge over the senders' ports (10.1.0.0/16) routing to the receiver's port (10.2.0.0/24)."""

    def config(self, **params: Any) -> Any:
        r = super().config(**params)
        node_run(self, ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])
        node_run(self, ["ip", "link", "add", "br0", "type", "bridge", "stp_state", "0", "forward_delay", "0"])
        # The port toward the receiver is the bottleneck link's (Mininet adds links sorted by name,
        # so the order of the interfaces says nothing).
        wan = next((i for i in self.intfList() if isinstance(getattr(i, "link", None), BottleneckLink)), None)
        if wan is None:
            raise MachineError(f"{self.name}: no BottleneckLink among its links; the router routes toward one")
        for intf in (i for i in self.intfList() if i is not wan):
            node_run(self, ["ip", "link", "set", intf.name, "master", "br0"])
        node_run(self, ["ip", "addr", "add", f"{ROUTER_LAN_IP}/16", "dev", "br0"])
        node_run(self, ["ip", "link", "set", "br0", "up"])
        node_run(self, ["ip", "addr", "add", f"{WAN_ROUTER_IP}/24", "dev", wan.name])
        return r

    def terminate(self) -> None:
        self.popen(["ip", "link", "del", "br0"]).wait()
        super().terminate()


class DumbbellTopo(Topo):
    """h1..hN -- s1 (router) -- r1, the bottleneck at s1's port toward r1.

    With l2switch=1 the senders' LAN is Mininet's own switch (Open vSwitch by default under `mn`;
    any `--switch`), and the router is a host g1 behind it: h1..hN -- s1 (switch) -- g1 -- r1, the
    bottleneck at g1's port toward r1. The switch runs standalone (a learning switch), so
    `--controller none` works with it.
    """

    def build(  # type: ignore[override]
        self,
        hosts: int = 2,
        rtt_ms: float = 87.0,
        rate_mbps: float = 62.5,
        buffer_packets: float | None = None,
        shaper: str = "htb",
        l2switch: int | str | bool = 0,
    ) -> None:
        hosts = int(hosts)
        if not 1 <= hosts <= MAX_HOSTS:
            refuse(f"hosts {hosts}: must be 1 to {MAX_HOSTS}")
        if str(l2switch).lower() not in ("0", "1", "false", "true"):
            refuse(f"l2switch {l2switch}: give 0 or 1")
        with_switch = str(l2switch).lower() in ("1", "true")
        # Everything is checked before Mininet makes anything: a refusal then leaves nothing behind.
        check_delay("dumbbell", f"{rtt_ms / 2}ms")
        bdp = int(float(rate_mbps) * 1e6 / 8 * float(rtt_ms) / 1000)
        default = max(bdp, FRAME_BYTES) if buffer_packets is None else None
        buffer = check_bottleneck("dumbbell", rate_mbps, buffer_packets, default, shaper)
        router = self.addHost("g1" if with_switch else "s1", cls=DumbbellRouter, ip=None)
        # failMode is Open vSwitch's; Mininet's other switch classes take and ignore it.
        lan = self.addSwitch("s1", failMode="standalone") if with_switch else router
        for i in range(1, int(hosts) + 1):
            ip = f"{LAN_PREFIX}.{i >> 8}.{i & 255}/16"
            h = self.addHost(f"h{i}", ip=ip, defaultRoute=f"via {ROUTER_LAN_IP}")
            self.addLink(h, lan, cls=AccessLink, delay=f"{rtt_ms / 2}ms")  # netem on both ends: RTT
        if with_switch:
            self.addLink(lan, router, cls=AccessLink)  # no delay; offloads off like every other port
        r1 = self.addHost("r1", ip=f"{RECEIVER_IP}/24", defaultRoute=f"via {WAN_ROUTER_IP}")
        self.addLink(router, r1, cls=BottleneckLink, bw=rate_mbps, buffer_bytes=buffer, shaper=shaper)


topos = {"dumbbell": DumbbellTopo}
