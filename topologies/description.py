"""The dumbbell as a plain description: names, addresses and the ip/tc/bridge lines that build it.

    h1 ─┐                                                 (delay line backend)
    h2 ─┼─ br0 [s1: bridge, then IP forwarding] ── s1-<run> ══ bottleneck ══ d1 (bsz-delayline) ── r1
    hH ─┘                                          (tbf|htb + bfifo)

Nothing here runs a command or needs root, so the generated lines can be checked anywhere (as
flent checks its parsers on captured output); bufsize.topologies.dumbbell executes them.

The hosts share a bridge (their side of the switch); s1 forwards at IP level from br0 to the
bottleneck port, as the router under study does. The IP hop matters: a packet received by IP is
detached from its sending socket (ip_rcv), so the sender's TCP Small Queues accounting stops at
the switch. Bridged straight through veths into the bottleneck, each packet stays charged to its
socket while it waits in the bottleneck queue, and TSQ then keeps every flow to about 1 ms of its
rate in that queue (measured: 2 cubic flows held 11-13 packets in a 100-packet buffer with no
loss): the buffer would never fill and the minimum buffer would come out far too small.
"""

from __future__ import annotations

from dataclasses import dataclass

from bufsize.topologies import FRAME_BYTES, netns
from bufsize.topologies.bottleneck import Bottleneck
from bufsize.topologies.config import DumbbellConfig
from bufsize.topologies.delay import netem_commands
from bufsize.topologies.line import LineBottleneck
from bufsize.topologies.units import tc_rate

RECEIVER_IP = "10.0.0.1"
RECEIVER_MAC = "02:bf:00:00:00:01"
SWITCH_LAN_MAC = "02:bf:00:00:ff:fe"  # br0, the hosts' next hop
SWITCH_LAN_IP = "10.0.255.254"
SWITCH_WAN_MAC = "02:bf:00:00:ff:fd"  # s1-eth0, the receiver's next hop
SWITCH_WAN_IP = "10.0.255.253"
PREFIX_LEN = 16
# The bottleneck port is named after the run (s1-<run id>): the net_dev_xmit tracepoint the fidelity
# monitor filters on knows a device only by name, so a name shared by two runs would mix their traces.
BOTTLENECK_PREFIX = "s1-"
RECEIVER_DEV = "r1-eth0"
DELAY_DEVS = ("d1-eth0", "d1-eth1")  # toward the switch, toward the receiver
# With the line shaper the port toward the receiver is the bottleneck's: named after the run like
# s1-<run>, so the fidelity trace (which filters on the name) sees this run's departures only.
LINE_DEV_PREFIX = "d1-"
# Offloads that would let one "packet" be up to 64 KB, and checksum offload, whose partial
# checksums a packet socket (the delay line) would forward unfinished.
OFFLOADS_OFF = ["tso", "off", "gso", "off", "gro", "off", "tx", "off"]

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

Job = tuple[list[str], str]  # argv, its standard input


def host_ip(i: int) -> str:
    return f"10.0.{1 + i // 256}.{i % 256}"


def host_mac(i: int) -> str:
    return f"02:bf:00:01:{i >> 8:02x}:{i & 0xFF:02x}"


def tcp_sysctls(cc: str, loss_recovery: str = "linux") -> list[str]:
    """Per-namespace TCP settings for senders and receiver (they vanish with the namespace)."""
    # config.LOSS_RECOVERIES: "dupack" turns off RACK (tcp_recovery bit 1) and tail-loss probes
    # (early_retrans 3 is the kernel's default; 0 schedules no probe).
    recovery = ["net.ipv4.tcp_recovery=0", "net.ipv4.tcp_early_retrans=0"] if loss_recovery == "dupack" else []
    return recovery + [
        f"net.ipv4.tcp_congestion_control={cc}",
        # Cached ssthresh from an earlier flow would make each run depend on the one before.
        "net.ipv4.tcp_no_metrics_save=1",
        # Windows far above the largest BDP (10 Gb/s x 10 s would not fit, 1 Gb/s x 250 ms does).
        "net.ipv4.tcp_rmem=4096 131072 33554432",
        "net.ipv4.tcp_wmem=4096 65536 33554432",
        "net.core.somaxconn=8192",
        "net.ipv4.tcp_max_syn_backlog=8192",
    ]


@dataclass(frozen=True)
class Host:
    index: int
    ns: str
    dev: str
    ip: str
    mac: str
    rtt_ms: float

    @property
    def switch_port(self) -> str:
        return f"s1-eth{self.index}"


def pacing_applies(cfg: DumbbellConfig, backend: str) -> bool:
    """The delay line's pacer runs only where asked, with HTB (a classful qdisc holds the filter
    that steals kicks) and with the delay line (which sends them)."""
    return cfg.pacer and cfg.shaper == "htb" and backend == "delayline"


class DumbbellPlan:
    """Every name and command line of one dumbbell, from its config, backend and run id."""

    def __init__(self, cfg: DumbbellConfig, backend: str, run_id: str) -> None:
        if backend not in ("netem", "delayline"):
            raise ValueError(f"backend must be resolved to netem or delayline, not {backend}")
        cfg = cfg.for_backend(backend)
        self.cfg, self.backend = cfg, backend
        ns_prefix = f"{netns.PREFIX}{run_id}-"
        # The switch's port toward the receiver: the bottleneck itself unless the shaper is the line.
        self.bottleneck_dev = f"{BOTTLENECK_PREFIX}{run_id}"[:15]  # IFNAMSIZ
        self.switch_ns = ns_prefix + "s1"
        self.receiver_ns = ns_prefix + "r1"
        self.delay_ns = ns_prefix + "d1" if backend == "delayline" else None
        self.receiver_ip, self.receiver_dev = RECEIVER_IP, RECEIVER_DEV
        self.hosts = [
            Host(i, f"{ns_prefix}h{i}", f"h{i}-eth0", host_ip(i), host_mac(i), cfg.rtt_ms[i - 1])
            for i in range(1, cfg.hosts + 1)
        ]
        self.pacing = pacing_applies(cfg, backend)
        self.line = cfg.shaper == "line"
        self.delay_devs = (DELAY_DEVS[0], f"{LINE_DEV_PREFIX}{run_id}"[:15]) if self.line else DELAY_DEVS
        self.bottleneck: Bottleneck
        if self.line:
            assert self.delay_ns is not None
            self.bottleneck = LineBottleneck(
                self.delay_ns, self.delay_devs[1], "line", cfg.rate_mbps, cfg.shaper_burst, cfg.initial_buffer_bytes()
            )
        else:
            self.bottleneck = Bottleneck(
                self.switch_ns,
                self.bottleneck_dev,
                cfg.shaper,
                cfg.rate_mbps,
                cfg.shaper_burst,
                cfg.initial_buffer_bytes(),
                kick_filter=self.pacing,
            )

    @property
    def namespaces(self) -> list[str]:
        extra = [self.delay_ns] if self.delay_ns else []
        return [self.switch_ns, self.receiver_ns, *extra, *(h.ns for h in self.hosts)]

    def links(self) -> str:
        """`ip -batch` lines (root namespace) making every veth pair, each end in its namespace."""
        sw = self.switch_ns
        lines = [
            f"link add name {h.dev} address {h.mac} netns {h.ns} type veth peer name {h.switch_port} netns {sw}\n"
            for h in self.hosts
        ]
        wan = f"link add name {self.bottleneck_dev} address {SWITCH_WAN_MAC} netns {sw} type veth peer name"
        recv = f"{self.receiver_dev} address {RECEIVER_MAC} netns {self.receiver_ns}"
        if self.delay_ns:
            lines.append(f"{wan} {self.delay_devs[0]} netns {self.delay_ns}\n")
            lines.append(f"link add name {self.delay_devs[1]} netns {self.delay_ns} type veth peer name {recv}\n")
        else:
            lines.append(f"{wan} {recv}\n")
        return "".join(lines)

    def interfaces(self) -> list[tuple[str, str]]:
        """(namespace, device) of every emulated interface: offloads go off on each."""
        out = [(self.switch_ns, self.bottleneck_dev), (self.receiver_ns, self.receiver_dev)]
        if self.delay_ns:
            out += [(self.delay_ns, d) for d in self.delay_devs]
        for h in self.hosts:
            out += [(h.ns, h.dev), (self.switch_ns, h.switch_port)]
        return out

    def sysctls(self, bridge_netfilter_loaded: bool) -> list[tuple[str, list[str]]]:
        """Per-namespace sysctls. The bridge-netfilter keys exist only where br_netfilter is loaded
        (stock kernels build it as a module, usually not loaded: then bridged frames skip netfilter)."""
        tcp = tcp_sysctls(self.cfg.cc, self.cfg.loss_recovery) + NO_IPV6
        switch = NO_IPV6 + (NO_BRIDGE_NETFILTER if bridge_netfilter_loaded else []) + ROUTER
        out = [(self.switch_ns, switch), (self.receiver_ns, tcp)]
        if self.delay_ns:
            out.append((self.delay_ns, NO_IPV6))
        out += [(h.ns, tcp) for h in self.hosts]
        return out

    def addresses(self) -> list[Job]:
        """Addresses, routes and static neighbours (no ARP on the bottleneck, none to lose when it is full)."""
        recv = [
            f"link set lo up\nlink set {self.receiver_dev} up\n"
            f"addr add {RECEIVER_IP}/{PREFIX_LEN} dev {self.receiver_dev}\n"
        ]
        if not self.cfg.delayed_ack:
            # The hosts' subnet route with the quickack metric, which the receiver's TCP reads for
            # every connection: each segment ACKed at once.
            recv.append(
                f"route replace 10.0.0.0/{PREFIX_LEN} dev {self.receiver_dev} proto kernel scope link "
                f"src {RECEIVER_IP} quickack 1\n"
            )
        recv += [
            f"neigh replace {h.ip} lladdr {SWITCH_WAN_MAC} dev {self.receiver_dev} nud permanent\n" for h in self.hosts
        ]
        jobs: list[Job] = [(["ip", "-n", self.receiver_ns, "-batch", "-"], "".join(recv))]
        for h in self.hosts:
            jobs.append(
                (
                    ["ip", "-n", h.ns, "-batch", "-"],
                    f"link set lo up\nlink set {h.dev} up\naddr add {h.ip}/{PREFIX_LEN} dev {h.dev}\n"
                    f"neigh replace {RECEIVER_IP} lladdr {SWITCH_LAN_MAC} dev {h.dev} nud permanent\n",
                )
            )
        sw = [f"link add name br0 address {SWITCH_LAN_MAC} type bridge stp_state 0 forward_delay 0 mcast_snooping 0\n"]
        sw += [f"link set {h.switch_port} master br0 up\n" for h in self.hosts]
        sw += [
            f"link set {self.bottleneck_dev} up\n",
            "link set br0 up\n",
            f"addr add {SWITCH_LAN_IP}/{PREFIX_LEN} dev br0\n",
            f"addr add {SWITCH_WAN_IP}/32 dev {self.bottleneck_dev}\n",
            f"route add {RECEIVER_IP}/32 dev {self.bottleneck_dev}\n",
            f"neigh replace {RECEIVER_IP} lladdr {RECEIVER_MAC} dev {self.bottleneck_dev} nud permanent\n",
        ]
        sw += [f"neigh replace {h.ip} lladdr {h.mac} dev br0 nud permanent\n" for h in self.hosts]
        jobs.append((["ip", "-n", self.switch_ns, "-batch", "-"], "".join(sw)))
        if self.delay_ns:
            ups = "".join(f"link set {d} up\n" for d in self.delay_devs)
            jobs.append((["ip", "-n", self.delay_ns, "-batch", "-"], ups))
        return jobs

    def forwarding_entries(self) -> Job:
        """Static bridge entries: the bridge never floods data to all hosts, even after ageing."""
        fdb = "".join(f"fdb replace {h.mac} dev {h.switch_port} master static\n" for h in self.hosts)
        return ["bridge", "-n", self.switch_ns, "-batch", "-"], fdb

    def qdiscs(self) -> list[Job]:
        """The bottleneck tree on the switch, and the access links: netem (delay, plus the access rate
        on the host side) or, with the delay line, a plain rate limit on each host's egress."""
        access = self.cfg.access_mbps or None
        jobs: list[Job] = []
        sw = self.bottleneck.commands()
        for h in self.hosts:
            one_way = int(round(h.rtt_ms * 500))
            if self.backend == "netem":
                host_q = netem_commands(h.dev, one_way, access)
                sw += netem_commands(h.switch_port, one_way, None)
            elif access:
                # A 1 Gb/s access link: bursts reach the switch at most this fast. Ten frames of burst
                # cover the kernel's timer granularity; the limit only has to never drop.
                host_q = [
                    f"qdisc add dev {h.dev} root handle 1: tbf rate {tc_rate(access)}"
                    f" burst {10 * FRAME_BYTES} limit {4 << 20}\n"
                ]
            else:
                host_q = []
            if host_q:
                jobs.append((["tc", "-n", h.ns, "-batch", "-"], "".join(host_q)))
        if sw:  # nothing with the line shaper and the delay line
            jobs.append((["tc", "-n", self.switch_ns, "-batch", "-"], "".join(sw)))
        return jobs

    def delay_map(self) -> list[tuple[str, float, float]]:
        """(sender address, forward ms, reverse ms) for the delay line: half the RTT each way, or all
        of it on the ack path with the line shaper, whose departures then go straight to the
        receiver (the same RTT for TCP, and the traced departures are the bottleneck's)."""
        if self.line:
            return [(h.ip, 0.0, h.rtt_ms) for h in self.hosts]
        return [(h.ip, h.rtt_ms / 2, h.rtt_ms / 2) for h in self.hosts]
