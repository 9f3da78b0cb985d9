"""The Mininet Topo's checks, without building anything: each bad value is refused with its name."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bufsize.topologies import mn_dumbbell as m
from bufsize.topologies.errors import UsageError
from bufsize.topologies.units import packets_to_bytes


@pytest.mark.parametrize("text,ms", [("43.5ms", 43.5), ("10us", 0.01), ("1s", 1000.0), (5, 5.0), ("0", 0.0)])
def test_mininet_delay_strings(text, ms):
    assert m.parse_delay_ms(text) == pytest.approx(ms)


@pytest.mark.parametrize("text", ["abc", "nan", "-1ms", "11s"])
def test_bad_delay_refused(text):
    with pytest.raises(UsageError, match="delay"):
        m.parse_delay_ms(text)


def test_bottleneck_buffer_from_packets_or_bytes():
    assert m.check_bottleneck("l", 10.0, 30, None, "htb") == packets_to_bytes(30)
    assert m.check_bottleneck("l", 10.0, None, 20_000, "tbf") == 20_000


@pytest.mark.parametrize(
    "args,needle",
    [
        ((10.0, 30, None, "red"), "shaper red"),
        ((10.0, 30, None, "line"), "shaper line"),  # no delay line under Mininet
        ((-1, 30, None, "htb"), "bw -1"),
        ((10.0, None, None, "htb"), "max_queue_size"),
        ((10.0, 0.1, None, "htb"), "buffer"),
        ((10.0, 30, None, "htb", "5ms"), "delay 5ms on the bottleneck"),
    ],
)
def test_bad_bottleneck_refused(args, needle):
    with pytest.raises(UsageError, match=needle):
        m.check_bottleneck("l", *args)


@pytest.mark.parametrize(
    "kwargs,needle",
    [({"hosts": 0}, "hosts 0"), ({"hosts": 2, "l2switch": "yes"}, "l2switch yes"), ({"shaper": "red"}, "shaper red")],
)
def test_bad_topo_arguments_refused_before_any_node(kwargs, needle):
    # rtt_ms=0: no netem needed, so the checks themselves are what refuse on any kernel.
    with pytest.raises(UsageError, match=needle):
        m.DumbbellTopo(rtt_ms=0, **kwargs)


@pytest.mark.parametrize("l2switch,switches,router", [(0, [], "s1"), (1, ["s1"], "g1")])
def test_topo_shape_with_and_without_mininets_switch(l2switch, switches, router):
    t = m.DumbbellTopo(hosts=3, rtt_ms=0, l2switch=l2switch)
    assert t.switches() == switches
    assert set(t.hosts()) == {"h1", "h2", "h3", "r1", router}
    bottleneck = [(a, b) for a, b, info in t.links(withInfo=True) if info.get("cls") is m.BottleneckLink]
    assert sorted(bottleneck[0]) == sorted((router, "r1")) and len(bottleneck) == 1


@pytest.mark.parametrize("param", [{"max_queue_size": 100}, {"bw": 10}, {"loss": 1}])
def test_access_link_refuses_what_only_tclink_would_do(param):
    # Refused before any interface exists, so the nodes are never touched.
    with pytest.raises(UsageError, match=f"AccessLink takes only delay, not {next(iter(param))}"):
        m.AccessLink(SimpleNamespace(name="h1"), SimpleNamespace(name="s1"), delay=0, **param)  # type: ignore[arg-type]
