"""The dumbbell's description and the ip/tc/bridge lines it generates, checked without root or a network."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bufsize.topologies import FRAME_BYTES, line
from bufsize.topologies.config import DumbbellConfig
from bufsize.topologies.description import NO_BRIDGE_NETFILTER, DumbbellPlan, host_ip, host_mac
from bufsize.topologies.errors import UsageError
from bufsize.topologies.line import LineBottleneck

RUN_ID = "abc123"
PREFIX = f"bsz-{RUN_ID}-"
BOTTLENECK_DEV = "s1-abc123"


def plan(backend: str, **kw) -> DumbbellPlan:
    cfg = DumbbellConfig(**({"hosts": 3, "rtt_ms": [20.0, 40.0, 87.0], "shaper": "htb"} | kw))
    return DumbbellPlan(cfg, backend, RUN_ID)


def test_dupack_recovery_turns_off_rack_and_tail_loss_probes_on_every_tcp_host_only():
    """--loss-recovery dupack: RACK and tail-loss probes off where TCP runs (senders, receiver); the
    default leaves the kernel's, and the switch and delay line carry no TCP setting either way."""
    off = {"net.ipv4.tcp_recovery=0", "net.ipv4.tcp_early_retrans=0"}
    dup = dict(plan("delayline", loss_recovery="dupack").sysctls(bridge_netfilter_loaded=False))
    for ns in (PREFIX + "h1", PREFIX + "h3", PREFIX + "r1"):
        assert off <= set(dup[ns])
    assert not off & set(dup[PREFIX + "s1"]) and not off & set(dup[PREFIX + "d1"])
    default = dict(plan("delayline").sysctls(bridge_netfilter_loaded=False))
    assert not any("tcp_recovery" in v or "tcp_early_retrans" in v for vals in default.values() for v in vals)
    with pytest.raises(UsageError, match="--loss-recovery fast: must be one of linux, dupack"):
        DumbbellConfig(loss_recovery="fast").validate()


def test_delayed_acks_off_puts_the_quickack_metric_on_the_receivers_route_only():
    def receiver_lines(p: DumbbellPlan) -> str:
        return next(stdin for argv, stdin in p.addresses() if p.receiver_ns in argv)

    off = receiver_lines(plan("delayline", delayed_ack=False))
    assert "route replace 10.0.0.0/16 dev r1-eth0 proto kernel scope link src 10.0.0.1 quickack 1\n" in off
    assert off.index("addr add 10.0.0.1/16") < off.index("quickack")  # the address (and its route) first
    assert "quickack" not in receiver_lines(plan("delayline"))
    assert not any("quickack" in stdin for argv, stdin in plan("delayline", delayed_ack=False).addresses()[1:])


def test_names_and_addresses_follow_the_prefix_and_host_index():
    p = plan("delayline")
    assert p.bottleneck_dev == p.bottleneck.dev == BOTTLENECK_DEV  # named after the run: traces filter by name
    assert p.namespaces == [PREFIX + "s1", PREFIX + "r1", PREFIX + "d1"] + [f"{PREFIX}h{i}" for i in (1, 2, 3)]
    assert [h.ip for h in p.hosts] == ["10.0.1.1", "10.0.1.2", "10.0.1.3"]
    assert host_ip(300) == "10.0.2.44" and host_mac(300) == "02:bf:00:01:01:2c"
    assert p.delay_map() == [("10.0.1.1", 10.0, 10.0), ("10.0.1.2", 20.0, 20.0), ("10.0.1.3", 43.5, 43.5)]
    assert plan("netem").delay_ns is None and len(plan("netem").namespaces) == 5
    with pytest.raises(ValueError, match="resolved"):
        plan("auto")


def test_links_put_the_delay_line_between_bottleneck_and_receiver_only_with_that_backend():
    dl = plan("delayline").links().splitlines()
    assert len(dl) == 3 + 2
    assert dl[0] == (
        f"link add name h1-eth0 address 02:bf:00:01:00:01 netns {PREFIX}h1 type veth peer name s1-eth1 netns {PREFIX}s1"
    )
    assert f"name {BOTTLENECK_DEV} " in dl[3] and f"peer name d1-eth0 netns {PREFIX}d1" in dl[3]
    assert dl[4].startswith(f"link add name d1-eth1 netns {PREFIX}d1") and f"netns {PREFIX}r1" in dl[4]
    ne = plan("netem").links().splitlines()
    assert len(ne) == 4 and f"peer name r1-eth0 address 02:bf:00:00:00:01 netns {PREFIX}r1" in ne[3]
    # Offloads go off on both ends of every pair: 2 per host, bottleneck + receiver, 2 delay-line ends.
    assert len(plan("delayline").interfaces()) == 2 * 3 + 2 + 2


def test_sysctls_name_the_congestion_control_and_bridge_netfilter_only_where_loaded():
    p = plan("delayline", cc="cubic")
    by_ns = dict(p.sysctls(bridge_netfilter_loaded=False))
    assert "net.ipv4.tcp_congestion_control=cubic" in by_ns[PREFIX + "h2"]
    assert "net.ipv4.ip_forward=1" in by_ns[PREFIX + "s1"]
    assert not set(NO_BRIDGE_NETFILTER) & set(by_ns[PREFIX + "s1"])
    assert set(NO_BRIDGE_NETFILTER) <= set(dict(p.sysctls(bridge_netfilter_loaded=True))[PREFIX + "s1"])


def test_static_neighbours_routes_and_forwarding_entries():
    p = plan("delayline")
    jobs = {argv[2]: text for argv, text in p.addresses()}
    switch = jobs[PREFIX + "s1"]
    assert f"route add 10.0.0.1/32 dev {BOTTLENECK_DEV}" in switch
    assert "neigh replace 10.0.1.3 lladdr 02:bf:00:01:00:03 dev br0 nud permanent" in switch
    assert "neigh replace 10.0.0.1 lladdr 02:bf:00:00:ff:fe dev h1-eth0 nud permanent" in jobs[PREFIX + "h1"]
    assert jobs[PREFIX + "d1"] == "link set d1-eth0 up\nlink set d1-eth1 up\n"
    argv, fdb = p.forwarding_entries()
    assert argv == ["bridge", "-n", PREFIX + "s1", "-batch", "-"]
    assert fdb.splitlines() == [f"fdb replace {host_mac(i)} dev s1-eth{i} master static" for i in (1, 2, 3)]


def test_qdiscs_netem_half_rtt_each_way_and_none_on_the_bottleneck():
    p = plan("netem", buffer_bytes=50 * FRAME_BYTES)
    jobs = {argv[2]: text.splitlines() for argv, text in p.qdiscs()}
    assert jobs[PREFIX + "h2"] == [
        "qdisc add dev h2-eth0 root handle 1: netem delay 20000us limit 100000 rate 1000000000bit"
    ]
    switch = jobs[PREFIX + "s1"]
    assert switch[0] == f"qdisc add dev {BOTTLENECK_DEV} root handle 1: htb default 1"
    # The default burst: 2 ms of 62.5 Mb/s is more than ten frames, so ten.
    assert "classid 1:1 htb rate 62500000bit ceil 62500000bit burst 15140 cburst 15140" in switch[1]
    assert switch[2] == f"qdisc add dev {BOTTLENECK_DEV} parent 1:1 handle 10: bfifo limit {50 * FRAME_BYTES}"
    assert switch[3:] == [f"qdisc add dev s1-eth{i} root handle 1: netem delay {d}us limit 100000" for i, d in
                          ((1, 10000), (2, 20000), (3, 43500))]  # fmt: skip
    assert not [line for line in switch if BOTTLENECK_DEV in line and "netem" in line]


def test_qdiscs_delay_line_backend_shapes_access_links_without_netem():
    p = plan("delayline", shaper="tbf")
    jobs = {argv[2]: text for argv, text in p.qdiscs()}
    assert "netem" not in "".join(jobs.values())
    assert (
        jobs[PREFIX + "h1"]
        == f"qdisc add dev h1-eth0 root handle 1: tbf rate 1000000000bit burst {10 * FRAME_BYTES} limit 4194304\n"
    )
    assert jobs[PREFIX + "s1"].startswith(
        f"qdisc add dev {BOTTLENECK_DEV} root handle 1: tbf rate 62500000bit burst 3028"
    )
    # The default buffer: one BDP at the largest RTT (87 ms at 62.5 Mb/s = 679687 bytes).
    assert p.bottleneck.buffer_bytes == 679687
    assert {argv[2] for argv, _ in plan("delayline", access_mbps=0).qdiscs()} == {PREFIX + "s1"}


def test_bottleneck_knows_its_handles_and_which_counters_are_its_drops():
    b = plan("delayline").bottleneck
    assert (b.leaf_handle, b.class_handle, b.root_handle) == (0x100000, 0x10001, 0x10000)
    assert b.own_drop_labels() == {"qdisc bfifo 10:", "qdisc htb 1:"}


def test_pacing_only_with_htb_and_the_delay_line_and_only_then_the_kick_filter():
    assert plan("delayline", pacer=True).pacing
    assert not plan("delayline", pacer=False).pacing
    assert not plan("netem", pacer=True).pacing
    assert not plan("delayline", pacer=True, shaper="tbf").pacing
    for p, filtered in ((plan("delayline", pacer=True), True), (plan("delayline", pacer=False), False)):
        sw = next(inp for argv, inp in p.qdiscs() if p.switch_ns in argv)
        assert ("protocol 0x88b5" in sw) == filtered


def test_line_shaper_is_the_delay_lines_port_with_all_delay_on_the_ack_path():
    p = plan("delayline", shaper="line", buffer_bytes=50 * FRAME_BYTES)
    assert isinstance(p.bottleneck, LineBottleneck)
    assert (p.bottleneck.ns, p.bottleneck.dev) == (PREFIX + "d1", "d1-abc123")  # named after the run
    assert p.delay_devs == ("d1-eth0", "d1-abc123")
    assert p.bottleneck_dev == BOTTLENECK_DEV  # the switch's port only forwards
    links = p.links()
    assert f"link add name d1-abc123 netns {PREFIX}d1 type veth peer name r1-eth0" in links
    # No qdisc tree on the switch; the TBF access links on the hosts stay.
    jobs = [argv for argv, _ in p.qdiscs()]
    assert not [a for a in jobs if PREFIX + "s1" in a] and len(jobs) == 3
    # The whole RTT on the ack path: the same RTT for TCP, and departures go straight to the receiver.
    assert p.delay_map() == [("10.0.1.1", 0.0, 20.0), ("10.0.1.2", 0.0, 40.0), ("10.0.1.3", 0.0, 87.0)]
    p.bottleneck.status_path = Path("/run/x/line-status")
    args = p.bottleneck.delayline_args()
    limit, burst = str(50 * FRAME_BYTES), str(10 * FRAME_BYTES)
    assert args == ["-L", limit, "-R", "62500000", "-B", burst, "-q", "/run/x/line-status"]
    assert p.bottleneck.own_drop_labels() == set()


def test_line_shaper_needs_the_delay_line():
    with pytest.raises(UsageError, match="delay-backend delayline"):
        plan("netem", shaper="line")
    with pytest.raises(UsageError, match="delay-backend delayline"):
        DumbbellConfig(shaper="line", delay_backend="netem").validate()
    with pytest.raises(UsageError, match="holds at most"):
        DumbbellConfig(shaper="line", buffer_bytes=(line.MAX_FRAMES + 1) * FRAME_BYTES).validate()
    # The catch-up allowance: 2 ms of the rate within 2..10 frames.
    assert DumbbellConfig(shaper="line").shaper_burst == 10 * FRAME_BYTES  # 62.5 Mb/s
    assert DumbbellConfig(shaper="line", rate_mbps=20).shaper_burst == 5000
    assert DumbbellConfig(shaper="line", rate_mbps=1).shaper_burst == 2 * FRAME_BYTES
    assert DumbbellConfig(shaper="line", rate_mbps=1000).shaper_burst == 10 * FRAME_BYTES


@pytest.mark.parametrize(
    "cpus,expected", [({0}, None), ({0, 1}, (1, 0b1)), ({0, 1, 2, 3}, (3, 0b111)), ({2, 5}, (5, 0b100))]
)
def test_line_isolation_takes_the_highest_cpu_and_steers_the_rest(cpus, expected):
    assert line.isolation(cpus) == expected


def test_auto_shaper_is_resolved_by_the_plan():
    """auto is never what runs: the plan holds the shaper resolved for its backend."""
    if len(os.sched_getaffinity(0)) < 2:
        with pytest.raises(UsageError, match="1 CPU"):
            plan("delayline", shaper="auto")
        return
    p = plan("delayline", shaper="auto")
    assert p.cfg.shaper == "line" and isinstance(p.bottleneck, LineBottleneck)
    with pytest.raises(UsageError, match="--shaper htb or tbf"):
        plan("netem", shaper="auto")  # never a silent HTB under netem
    many = plan("delayline", shaper="auto", hosts=400, rtt_ms=[87.0] * 400)
    assert many.cfg.shaper == "line" and isinstance(many.bottleneck, LineBottleneck)
    assert plan("netem", shaper="htb").cfg.shaper == "htb"
