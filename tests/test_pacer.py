"""The delay line's pacer on a real dumbbell: its kick frames vanish at the shaper, and the shaper
still sets the rate."""

from __future__ import annotations

import json
import time

import pytest
from conftest import in_ns

from bufsize.monitors import fidelity
from bufsize.topologies import FRAME_BYTES, shaper
from bufsize.topologies.config import DumbbellConfig
from bufsize.topologies.dumbbell import Dumbbell
from bufsize.traffic.longflows import LongFlows

pytestmark = pytest.mark.integration

RATE_MBPS = 20.0
# The delay line's kick (delayline.c): broadcast, locally administered source, the kick ethertype.
KICK = b"\xff" * 6 + b"\x02" + b"\x00" * 5 + shaper.KICK_ETHERTYPE.to_bytes(2, "big") + b"\x00" * 46


def qdisc_stats(net: Dumbbell) -> dict[str, dict]:
    """`tc -s` counters of the bottleneck's qdiscs by handle ('1:' the shaper, '10:' the buffer)."""
    out = in_ns(net.switch_ns, "tc", "-s", "-j", "qdisc", "show", "dev", net.bottleneck.dev)
    return {q["handle"]: q for q in json.loads(out)}


def forward_stats(net: Dumbbell) -> dict:
    assert net.delayline is not None
    time.sleep(0.5)  # it rewrites its stats file every 200 ms
    return net.delayline.stats()


def pacing_net(hosts: int, rtt_ms: float, buffer_packets: int) -> Dumbbell:
    cfg = DumbbellConfig(
        hosts=hosts,
        rate_mbps=RATE_MBPS,
        rtt_ms=[rtt_ms] * hosts,
        buffer_bytes=buffer_packets * FRAME_BYTES,
        cc="cubic",
        shaper="htb",
        pacer=True,
    )
    return Dumbbell(cfg, "delayline")


def test_kicks_are_neither_queued_nor_sent_nor_dropped(no_leftovers):
    """A burst of kicks on an idle bottleneck: the shaper's filter steals every one."""
    with pacing_net(1, 5.0, 100) as net:
        assert net.pacing and "protocol 0x88b5" in "".join(net.bottleneck.commands())
        filters = in_ns(net.switch_ns, "tc", "filter", "show", "dev", net.bottleneck.dev)
        assert "bpf" in filters, filters
        before_q, before_dl = qdisc_stats(net), forward_stats(net)
        with net.bottleneck.counters() as dev, net.bottleneck.kick_socket() as sock:
            before = dev.read()
            for _ in range(2000):
                assert sock.send(KICK) == len(KICK)
            after = dev.read()
        after_q, after_dl = qdisc_stats(net), forward_stats(net)
    # Not sent: the device transmitted nothing, the delay line (all the receiver gets) read nothing.
    assert after.tx_packets - before.tx_packets < 5 and after.tx_dropped == before.tx_dropped
    assert after_dl["forward"]["rx_frames"] - before_dl["forward"]["rx_frames"] < 5
    for handle in ("1:", "10:"):
        # Not queued, not counted as a drop, not dequeued, by the shaper or the buffer.
        assert after_q[handle]["drops"] == before_q[handle]["drops"] == 0, after_q[handle]
        assert after_q[handle]["packets"] - before_q[handle]["packets"] < 5
        assert after_q[handle]["qlen"] == 0 and after_q[handle]["backlog"] == 0


def test_paced_departures_keep_the_configured_rate_and_kicks_never_leave(no_leftovers):
    """Flows through a paced bottleneck: kicks release frames, yet the rate is the shaper's and every
    frame the device sent came through the buffer and reached the delay line."""
    with pacing_net(2, 20.0, 100) as net, LongFlows(net, 4) as flows:
        time.sleep(3)
        with net.bottleneck.counters() as dev:
            a = dev.read()
            fid, _ = fidelity.measure(net.bottleneck.dev, RATE_MBPS, 3.0, net.state)
            b = dev.read()
        dl = forward_stats(net)["pacer"]
        flows.check()
        flows.stop()
        time.sleep(0.5)  # the last departures reach the delay line
        q, fwd = qdisc_stats(net), forward_stats(net)
        with net.bottleneck.counters() as dev:
            sent = dev.read().tx_packets
    # The pacer acted: it kicks only where HTB's own timer is late, so how often depends on the machine;
    # kicks that released frames show it at work without a figure.
    assert dl["on"] and dl["kicks"] > 0 and dl["hits"] > 0 and dl["send_errors"] == 0, dl
    # Never faster than the shaper's rate: the device's counters (the floor only says traffic ran;
    # utilization is not the point and suffers on a loaded machine) and the busy gaps' mean.
    rate = (b.tx_bytes - a.tx_bytes) * 8 / (b.t - a.t) / 1e6
    assert 0 < rate <= 1.01 * RATE_MBPS, rate
    # One-sided on purpose: the paced link has been seen to fall short of C (19.75 of 20 Mb/s here in a
    # quiet CI rehearsal; ~37 of 62.5 in a long search), the open defect that keeps the pacer off by
    # default (docs/network.md, the pacer); what must never happen is running faster than the shaper.
    assert fid["available"] and fid["rate_from_gaps_mbps"] <= 1.01 * RATE_MBPS, fid
    # Kicks, yet every frame the device sent came out of the buffer, was read by the
    # delay line, and the shaper counted only the buffer's drops (it counts its child's again).
    assert q["10:"]["packets"] == q["1:"]["packets"] == sent
    assert abs(fwd["forward"]["rx_frames"] - sent) <= 2, (fwd["forward"], sent)
    assert q["1:"]["drops"] == q["10:"]["drops"]
    assert fwd["forward"]["drop_kernel"] == 0
