"""The dumbbell: H sender hosts -> one switch/router -> one receiver.

    h1 ─┐                                                 (delay line backend)
    h2 ─┼─ br0 [s1: bridge, then IP forwarding] ── s1-eth0 ══ bottleneck ══ d1 (bsz-delayline) ── r1
    hH ─┘                                          (tbf|htb + bfifo)

The hosts share a bridge (their side of the switch); s1 forwards at IP level from br0 to the
bottleneck port, as the router under study does. The IP hop matters: a packet received by IP is
detached from its sending socket (ip_rcv), so the sender's TCP Small Queues accounting stops at
the switch. Bridged straight through veths into the bottleneck, each packet stays charged to its
socket while it waits in the bottleneck queue, and TSQ then keeps every flow to about 1 ms of its
rate in that queue (measured: 2 cubic flows held 11-13 packets in a 100-packet buffer with no
loss): the buffer would never fill and the minimum buffer would come out far too small.

Every node is a network namespace named bsz-<run>-<node>; every interface lives inside one, so
deleting the namespaces removes all interfaces and qdiscs. Namespaces and processes are written
to the run's state file before they are created (see buffersizing.runstate).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from buffersizing import FRAME_BYTES, netns, sysctl
from buffersizing.config import DumbbellConfig
from buffersizing.errors import RunError
from buffersizing.proc import run
from buffersizing.runstate import RunState, teardown
from topologies import shaper
from topologies.delay import DelayLine, netem_commands

RECEIVER_IP = "10.0.0.1"
RECEIVER_MAC = "02:bf:00:00:00:01"
SWITCH_LAN_MAC = "02:bf:00:00:ff:fe"  # br0, the hosts' next hop
SWITCH_LAN_IP = "10.0.255.254"
SWITCH_WAN_MAC = "02:bf:00:00:ff:fd"  # s1-eth0, the receiver's next hop
SWITCH_WAN_IP = "10.0.255.253"
PREFIX_LEN = 16
BOTTLENECK_DEV = "s1-eth0"
# Offloads that would let one "packet" be up to 64 KB, and checksum offload, whose partial
# checksums a packet socket (the delay line) would forward unfinished.
OFFLOADS_OFF = ["tso", "off", "gso", "off", "gro", "off", "tx", "off"]
PARALLEL = 8


def host_ip(i: int) -> str:
    return f"10.0.{1 + i // 256}.{i % 256}"


def host_mac(i: int) -> str:
    return f"02:bf:00:01:{i >> 8:02x}:{i & 0xFF:02x}"


@dataclass(frozen=True)
class Host:
    index: int
    ns: str
    dev: str
    ip: str
    mac: str
    rtt_ms: float


def tcp_sysctls(cc: str) -> list[str]:
    """Per-namespace TCP settings for senders and receiver (they vanish with the namespace)."""
    return [
        f"net.ipv4.tcp_congestion_control={cc}",
        # Cached ssthresh from an earlier flow would make each run depend on the one before.
        "net.ipv4.tcp_no_metrics_save=1",
        # Windows far above the largest BDP (10 Gb/s x 10 s would not fit, 1 Gb/s x 250 ms does).
        "net.ipv4.tcp_rmem=4096 131072 33554432",
        "net.ipv4.tcp_wmem=4096 65536 33554432",
        "net.core.somaxconn=8192",
        "net.ipv4.tcp_max_syn_backlog=8192",
    ]


NO_IPV6 = ["net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"]
ROUTER = [
    "net.ipv4.ip_forward=1",
    "net.ipv4.conf.all.rp_filter=0",
    "net.ipv4.conf.default.rp_filter=0",
    "net.ipv4.conf.all.send_redirects=0",
    "net.ipv4.conf.default.send_redirects=0",
]
NO_BRIDGE_NETFILTER = [
    "net.bridge.bridge-nf-call-iptables=0",
    "net.bridge.bridge-nf-call-ip6tables=0",
    "net.bridge.bridge-nf-call-arptables=0",
]


def no_bridge_netfilter() -> list[str]:
    """NO_BRIDGE_NETFILTER where br_netfilter is loaded. Stock kernels build it as a module that is
    usually not loaded: then bridged frames never reach netfilter and these keys do not exist."""
    return NO_BRIDGE_NETFILTER if Path("/proc/sys/net/bridge").is_dir() else []


class Dumbbell:
    """Builds, reconfigures and removes one dumbbell. Use as a context manager."""

    def __init__(self, cfg: DumbbellConfig, backend: str, state: RunState | None = None) -> None:
        cfg.validate()
        if backend not in ("netem", "delayline"):
            raise ValueError(f"backend must be resolved to netem or delayline, not {backend}")
        self.cfg = cfg
        self.backend = backend
        self.state = state or RunState.create()
        base = f"{netns.PREFIX}{self.state.run_id}-"
        self.switch_ns = base + "s1"
        self.receiver_ns = base + "r1"
        self.delay_ns = base + "d1" if backend == "delayline" else None
        self.receiver_ip = RECEIVER_IP
        self.receiver_dev = "r1-eth0"
        self.hosts = [
            Host(i, f"{base}h{i}", f"h{i}-eth0", host_ip(i), host_mac(i), cfg.rtt_ms[i - 1])
            for i in range(1, cfg.hosts + 1)
        ]
        self.buffer_bytes = cfg.initial_buffer_bytes()
        self.delayline: DelayLine | None = None
        self._built = False

    # ---- life cycle -------------------------------------------------------------------------

    def __enter__(self) -> Dumbbell:
        try:
            self.build()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def namespaces(self) -> list[str]:
        extra = [self.delay_ns] if self.delay_ns else []
        return [self.switch_ns, self.receiver_ns, *extra, *(h.ns for h in self.hosts)]

    def build(self) -> None:
        self.state.add_namespaces(self.namespaces)
        netns.add_many(self.namespaces)
        # Bursts leave veths through the per-CPU backlog (netdev_max_backlog, global, default 1000);
        # a drop there would be a loss outside the bottleneck.
        sysctl.raise_global(self.state, "net.core.netdev_max_backlog", 100_000)
        # Outside the initial namespace a host may only default to an "allowed" congestion control.
        allowed = sysctl.read("net.ipv4.tcp_allowed_congestion_control").split()
        if self.cfg.cc not in allowed:
            sysctl.set_global(self.state, "net.ipv4.tcp_allowed_congestion_control", " ".join([*allowed, self.cfg.cc]))
        run(["ip", "-batch", "-"], input="".join(self._link_lines()), timeout=300)
        self._parallel([netns.in_ns(ns, ["sysctl", "-q", "-w", *vals]) for ns, vals in self._sysctls()])
        self._parallel([netns.in_ns(ns, ["ethtool", "-K", dev, *OFFLOADS_OFF]) for ns, dev in self._interfaces()])
        self._configure_addresses()
        self._configure_qdiscs()
        self._wait_bridge_forwarding()
        if self.backend == "delayline":
            assert self.delay_ns is not None
            self.delayline = DelayLine(
                self.state, self.delay_ns, "d1-eth0", "d1-eth1", [(h.ip, h.rtt_ms) for h in self.hosts]
            )
            self.delayline.start()
        self._built = True

    def stop(self) -> list[str]:
        """Remove everything this dumbbell created (idempotent)."""
        if self.delayline is not None:
            self.delayline.stop()
        self._built = False
        return teardown(self.state)

    # ---- what build() does ------------------------------------------------------------------

    def _link_lines(self) -> list[str]:
        sw = self.switch_ns
        lines = [
            f"link add name {h.dev} address {h.mac} netns {h.ns} type veth peer name s1-eth{h.index} netns {sw}\n"
            for h in self.hosts
        ]
        if self.delay_ns:
            lines.append(
                f"link add name {BOTTLENECK_DEV} address {SWITCH_WAN_MAC} netns {sw} type veth"
                f" peer name d1-eth0 netns {self.delay_ns}\n"
            )
            lines.append(
                f"link add name d1-eth1 netns {self.delay_ns} type veth"
                f" peer name {self.receiver_dev} address {RECEIVER_MAC} netns {self.receiver_ns}\n"
            )
        else:
            lines.append(
                f"link add name {BOTTLENECK_DEV} address {SWITCH_WAN_MAC} netns {sw} type veth"
                f" peer name {self.receiver_dev} address {RECEIVER_MAC} netns {self.receiver_ns}\n"
            )
        return lines

    def _interfaces(self) -> list[tuple[str, str]]:
        out = [(self.switch_ns, BOTTLENECK_DEV), (self.receiver_ns, self.receiver_dev)]
        if self.delay_ns:
            out += [(self.delay_ns, "d1-eth0"), (self.delay_ns, "d1-eth1")]
        for h in self.hosts:
            out += [(h.ns, h.dev), (self.switch_ns, f"s1-eth{h.index}")]
        return out

    def _sysctls(self) -> list[tuple[str, list[str]]]:
        tcp = tcp_sysctls(self.cfg.cc) + NO_IPV6
        out = [(self.switch_ns, NO_IPV6 + no_bridge_netfilter() + ROUTER), (self.receiver_ns, tcp)]
        if self.delay_ns:
            out.append((self.delay_ns, NO_IPV6))
        out += [(h.ns, tcp) for h in self.hosts]
        return out

    def _configure_addresses(self) -> None:
        jobs: list[tuple[list[str], str]] = []
        # Static neighbours: no ARP on the bottleneck, and none to lose when it is full.
        recv = [
            f"link set lo up\nlink set {self.receiver_dev} up\n"
            f"addr add {RECEIVER_IP}/{PREFIX_LEN} dev {self.receiver_dev}\n"
        ]
        recv += [
            f"neigh replace {h.ip} lladdr {SWITCH_WAN_MAC} dev {self.receiver_dev} nud permanent\n" for h in self.hosts
        ]
        jobs.append((["ip", "-n", self.receiver_ns, "-batch", "-"], "".join(recv)))
        for h in self.hosts:
            jobs.append(
                (
                    ["ip", "-n", h.ns, "-batch", "-"],
                    f"link set lo up\nlink set {h.dev} up\naddr add {h.ip}/{PREFIX_LEN} dev {h.dev}\n"
                    f"neigh replace {RECEIVER_IP} lladdr {SWITCH_LAN_MAC} dev {h.dev} nud permanent\n",
                )
            )
        sw = [f"link add name br0 address {SWITCH_LAN_MAC} type bridge stp_state 0 forward_delay 0 mcast_snooping 0\n"]
        sw += [f"link set s1-eth{h.index} master br0 up\n" for h in self.hosts]
        sw += [
            f"link set {BOTTLENECK_DEV} up\n",
            "link set br0 up\n",
            f"addr add {SWITCH_LAN_IP}/{PREFIX_LEN} dev br0\n",
            f"addr add {SWITCH_WAN_IP}/32 dev {BOTTLENECK_DEV}\n",
            f"route add {RECEIVER_IP}/32 dev {BOTTLENECK_DEV}\n",
            f"neigh replace {RECEIVER_IP} lladdr {RECEIVER_MAC} dev {BOTTLENECK_DEV} nud permanent\n",
        ]
        sw += [f"neigh replace {h.ip} lladdr {h.mac} dev br0 nud permanent\n" for h in self.hosts]
        jobs.append((["ip", "-n", self.switch_ns, "-batch", "-"], "".join(sw)))
        if self.delay_ns:
            jobs.append((["ip", "-n", self.delay_ns, "-batch", "-"], "link set d1-eth0 up\nlink set d1-eth1 up\n"))
        self._parallel_input(jobs)
        # Static forwarding entries: the bridge never floods data to all hosts, even after ageing.
        fdb = [f"fdb replace {h.mac} dev s1-eth{h.index} master static\n" for h in self.hosts]
        run(["bridge", "-n", self.switch_ns, "-batch", "-"], input="".join(fdb), timeout=120)

    def _wait_bridge_forwarding(self, timeout: float = 15.0) -> None:
        """Bridge ports pass through a non-forwarding state after they come up; frames sent then are lost."""
        deadline = time.monotonic() + timeout
        while True:
            out = run(["bridge", "-n", self.switch_ns, "-j", "link", "show"]).stdout
            ports = json.loads(out or "[]")
            waiting = [p["ifname"] for p in ports if p.get("state") != "forwarding"]
            if len(ports) == self.cfg.hosts and not waiting:
                return
            if time.monotonic() > deadline:
                raise RunError(f"bridge ports not forwarding after {timeout:.0f} s: {', '.join(waiting[:5])}")
            time.sleep(0.05)

    def _configure_qdiscs(self) -> None:
        cfg = self.cfg
        access = cfg.access_mbps or None
        jobs: list[tuple[list[str], str]] = []
        sw = shaper.build_commands(BOTTLENECK_DEV, cfg.shaper, cfg.rate_mbps, self.buffer_bytes, cfg.shaper_burst)
        for h in self.hosts:
            one_way = int(round(h.rtt_ms * 500))
            if self.backend == "netem":
                host_q = netem_commands(h.dev, one_way, access)
                sw += [
                    line.replace(f"dev {h.dev}", f"dev s1-eth{h.index}")
                    for line in netem_commands(h.dev, one_way, None)
                ]
            elif access:
                # A 1 Gb/s access link: bursts reach the switch at most this fast. Ten frames of burst
                # cover the kernel's timer granularity; the limit only has to never drop.
                host_q = [
                    f"qdisc add dev {h.dev} root handle 1: tbf rate {int(access * 1e6)}bit"
                    f" burst {10 * FRAME_BYTES} limit {4 << 20}\n"
                ]
            else:
                host_q = []
            if host_q:
                jobs.append((["tc", "-n", h.ns, "-batch", "-"], "".join(host_q)))
        jobs.append((["tc", "-n", self.switch_ns, "-batch", "-"], "".join(sw)))
        self._parallel_input(jobs)

    @staticmethod
    def _parallel(cmds: Sequence[list[str]]) -> None:
        Dumbbell._parallel_input([(c, "") for c in cmds])

    @staticmethod
    def _parallel_input(jobs: Sequence[tuple[list[str], str]]) -> None:
        with ThreadPoolExecutor(PARALLEL) as pool:
            for fut in [pool.submit(run, argv, input=inp or None, timeout=120) for argv, inp in jobs]:
                fut.result()

    # ---- while running ----------------------------------------------------------------------

    def set_buffer(self, buffer_bytes: int) -> None:
        """Change the bottleneck buffer in place; nothing else in the tree is touched."""
        if buffer_bytes < FRAME_BYTES:
            raise ValueError(f"buffer {buffer_bytes} bytes is below one packet ({FRAME_BYTES})")
        shaper.set_buffer(self.switch_ns, BOTTLENECK_DEV, buffer_bytes)
        self.buffer_bytes = buffer_bytes

    def spawn(self, ns: str, argv: Sequence[str], what: str, **popen_kw) -> subprocess.Popen:
        """Start a program inside one of this dumbbell's namespaces, recorded for teardown."""
        popen_kw.setdefault("start_new_session", True)
        proc = subprocess.Popen(netns.in_ns(ns, argv), **popen_kw)
        self.state.add_process(proc.pid, what)
        return proc

    def check_alive(self) -> None:
        """Raise if the delay line has died (traffic would silently stop)."""
        if self.delayline is not None and not self.delayline.alive():
            raise RunError("the delay line process exited; the emulated path is broken")
