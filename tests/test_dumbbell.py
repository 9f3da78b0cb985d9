"""Real dumbbells: namespaces, veths, a bridge, the bottleneck tree, per-host TCP settings."""

from __future__ import annotations

import re
import subprocess
import time

import pytest
from conftest import in_ns

from bufsize.longlived.verify import measure_rtts
from bufsize.topologies import FRAME_BYTES, sysctl
from bufsize.topologies.config import DumbbellConfig, parse_rtts
from bufsize.topologies.counters import InterfaceCounters
from bufsize.topologies.dumbbell import HALT_POLL_NS, Dumbbell

pytestmark = pytest.mark.integration


@pytest.fixture(params=["tbf"])
def net(request, no_leftovers):
    cfg = DumbbellConfig(
        hosts=3, rate_mbps=20, rtt_ms=[10.0, 10.0, 10.0], buffer_bytes=60_000, cc="cubic", shaper=request.param
    )
    with Dumbbell(cfg, "delayline") as n:
        yield n


def test_offloads_are_off_on_every_interface(net):
    pairs = [(net.switch_ns, net.bottleneck.dev), (net.receiver_ns, net.receiver_dev), (net.delay_ns, "d1-eth0")]
    pairs += [(h.ns, h.dev) for h in net.hosts] + [(net.switch_ns, f"s1-eth{h.index}") for h in net.hosts]
    for ns, dev in pairs:
        feats = in_ns(ns, "ethtool", "-k", dev)
        for name in ("tcp-segmentation-offload", "generic-segmentation-offload", "generic-receive-offload"):
            assert re.search(rf"^{name}: off", feats, re.M), f"{name} on {dev} in {ns}"
        link = in_ns(ns, "ip", "-o", "link", "show", "dev", dev)
        assert " mtu 1500 " in link


def test_host_tcp_settings_and_bridge_netfilter(net):
    for ns in [h.ns for h in net.hosts] + [net.receiver_ns]:
        out = in_ns(ns, "sysctl", "-n", "net.ipv4.tcp_congestion_control", "net.ipv4.tcp_no_metrics_save")
        assert out.split() == ["cubic", "1"]
    out = in_ns(
        net.switch_ns, "sysctl", "-n", "net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-arptables"
    )
    assert out.split() == ["0", "0"]


def test_the_kernels_loss_recovery_and_delayed_acks_by_default_and_turned_off_when_asked(net, no_leftovers):
    """The fixture's dumbbell keeps the kernel's RACK, tail-loss probes and delayed ACKs; one built
    with --loss-recovery dupack --delayed-ack off turns the first two off on every TCP host and
    puts the quickack metric on the receiver's route to the hosts (its TCP then ACKs each segment)."""
    keys = ("net.ipv4.tcp_recovery", "net.ipv4.tcp_early_retrans")
    assert in_ns(net.hosts[0].ns, "sysctl", "-n", *keys).split() != ["0", "0"]
    assert "quickack" not in in_ns(net.receiver_ns, "ip", "route", "show")
    cfg = DumbbellConfig(hosts=2, rate_mbps=20, rtt_ms=[10.0, 10.0], loss_recovery="dupack", delayed_ack=False)
    with Dumbbell(cfg, "delayline") as other:
        for ns in [h.ns for h in other.hosts] + [other.receiver_ns]:
            assert in_ns(ns, "sysctl", "-n", *keys).split() == ["0", "0"], ns
        routes = in_ns(other.receiver_ns, "ip", "route", "show", "10.0.0.0/16")
        assert "quickack 1" in routes and "src 10.0.0.1" in routes, routes


def test_bottleneck_tree_is_tbf_with_bfifo_leaf(net):
    out = in_ns(net.switch_ns, "tc", "qdisc", "show", "dev", net.bottleneck.dev)
    assert re.search(r"qdisc tbf 1: root .*rate 20Mbit", out)
    assert "qdisc bfifo 10: parent 1:1 limit 60000b" in out


@pytest.mark.parametrize("net", ["htb", "tbf"], indirect=True)
def test_buffer_changes_in_place_under_a_running_flow(net):
    """The leaf's limit changes; the shaper keeps its counters, the flow keeps its connection and its
    bytes go on through the smaller buffer. How much of the line the flow holds afterwards is a claim
    (tests/claims: in-place-tbf, in-place-htb), judged on a run the machine let alone."""
    server = net.spawn(net.receiver_ns, ["iperf", "-s", "-p", "5001"], "server", stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    h = net.hosts[0]
    client = net.spawn(
        h.ns,
        ["iperf", "-c", net.receiver_ip, "-t", "5", "-i", "1"],
        "client",
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    counters = InterfaceCounters(net.switch_ns, net.bottleneck.dev)
    try:
        time.sleep(2)
        before_tree = in_ns(net.switch_ns, "tc", "-s", "qdisc", "show", "dev", net.bottleneck.dev)
        sent_before = int(re.search(r"qdisc (?:tbf|htb) 1: .*?Sent (\d+) bytes", before_tree, re.S).group(1))
        net.set_buffer(4 * FRAME_BYTES)
        after_tree = in_ns(net.switch_ns, "tc", "-s", "qdisc", "show", "dev", net.bottleneck.dev)
        assert f"qdisc bfifo 10: parent 1:1 limit {4 * FRAME_BYTES}b" in after_tree
        sent_after = int(re.search(r"qdisc (?:tbf|htb) 1: .*?Sent (\d+) bytes", after_tree, re.S).group(1))
        assert sent_after >= sent_before > 0, "the shaper was recreated (its counters reset)"
        first = counters.read()
        out, _ = client.communicate(timeout=15)
        last = counters.read()
        assert last.tx_bytes > first.tx_bytes, "nothing left the bottleneck after the change"
        assert client.returncode == 0 and "connected" in out
        assert not re.search(r"reset|refused|failed", out, re.I), out
    finally:
        counters.close()
        for p in (client, server):
            p.kill()
            p.wait()


def test_htb_shaper_tree(no_leftovers):
    cfg = DumbbellConfig(hosts=1, rate_mbps=10, rtt_ms=[5.0], shaper="htb", buffer_bytes=30_000)
    with Dumbbell(cfg, "delayline") as net:
        out = in_ns(net.switch_ns, "tc", "class", "show", "dev", net.bottleneck.dev)
        assert re.search(r"class htb 1:1 root leaf 10: .*rate 10Mbit ceil 10Mbit", out)
        net.set_buffer(3 * FRAME_BYTES)
        out = in_ns(net.switch_ns, "tc", "qdisc", "show", "dev", net.bottleneck.dev)
        assert f"qdisc bfifo 10: parent 1:1 limit {3 * FRAME_BYTES}b" in out


def test_each_host_gets_its_own_rtt(no_leftovers):
    """Every host answers pings, in host order, none before its own delay (a frame cannot leave the
    delay line early; a host given another's smaller delay fails). That each lands on its own RTT is
    a claim (tests/claims: host-rtts)."""
    cfg = DumbbellConfig(hosts=4, rtt_ms=parse_rtts("20..300", 4))
    with Dumbbell(cfg, "delayline") as net:
        results = measure_rtts(net, count=5, interval=0.05)
    assert [r.host for r in results] == [1, 2, 3, 4]
    assert [r.configured_ms for r in results] == cfg.rtt_ms
    for r in results:
        assert r.min_ms >= r.configured_ms and r.loss_pct == 0, r


def test_halt_poll_is_raised_for_the_run_and_restored_after(no_leftovers):
    """On a KVM guest with the haltpoll idle driver, idle vCPUs poll up to HALT_POLL_NS while a run
    lasts (the steal with which answers moved comes with halted vCPUs waking); elsewhere nothing is
    written and the dumbbell says there was no poll to set. A run that starts while another holds
    the poll raised records the machine's own value as before, not the other run's."""
    present = sysctl.exists(sysctl.HALT_POLL)
    before = sysctl.read(sysctl.HALT_POLL) if present else None
    with Dumbbell(DumbbellConfig(hosts=1, rtt_ms=[1.0]), "delayline") as net:
        during = sysctl.read(sysctl.HALT_POLL) if present else None
        recorded = net.halt_poll
        # (HTB: the first run's line holds the CPU a second line would need in this process.)
        with Dumbbell(DumbbellConfig(hosts=1, rtt_ms=[1.0], shaper="htb"), "delayline") as second:
            recorded_second = second.halt_poll
        assert sysctl.read(sysctl.HALT_POLL) == during  # the first run still holds it
    if not present:
        assert recorded is None and recorded_second is None and not sysctl.exists(sysctl.HALT_POLL)
        return
    assert int(during) >= HALT_POLL_NS and recorded == {"before_run_ns": int(before), "during_run_ns": int(during)}
    assert recorded_second == recorded
    assert sysctl.read(sysctl.HALT_POLL) == before


def test_global_sysctl_is_restored_after_the_run(no_leftovers):
    before = sysctl.read("net.core.netdev_max_backlog")
    with Dumbbell(DumbbellConfig(hosts=1, rtt_ms=[1.0]), "delayline"):
        during = sysctl.read("net.core.netdev_max_backlog")
    assert int(during) >= 100_000
    assert sysctl.read("net.core.netdev_max_backlog") == before
