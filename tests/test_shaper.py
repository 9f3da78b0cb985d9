"""The bottleneck tree's shape, as tc batch lines."""

import pytest

from bufsize.topologies import shaper


def test_tbf_tree_has_bfifo_leaf_under_1_1():
    lines = shaper.build_commands("s1-eth0", "tbf", 62.5, 50000, 3028)
    assert lines[0].startswith("qdisc add dev s1-eth0 root handle 1: tbf rate 62500000bit burst 3028")
    assert lines[-1] == "qdisc add dev s1-eth0 parent 1:1 handle 10: bfifo limit 50000\n"
    assert len(lines) == 2


def test_htb_tree_has_class_and_bfifo_leaf():
    lines = shaper.build_commands("s1-eth0", "htb", 10, 20000, 1514)
    assert "htb default 1" in lines[0]
    assert "classid 1:1 htb rate 10000000bit ceil 10000000bit" in lines[1]
    assert lines[2] == "qdisc add dev s1-eth0 parent 1:1 handle 10: bfifo limit 20000\n"


def test_htb_with_the_pacer_steals_kicks_and_tbf_cannot():
    lines = shaper.build_commands("s1-eth0", "htb", 10, 20000, 1514, kick_filter=True)
    assert len(lines) == 4
    assert lines[3].startswith("filter add dev s1-eth0 parent 1: protocol 0x88b5 prio 1 bpf da")
    assert "'1,6 0 0 4,'" in lines[3]  # one instruction: return TC_ACT_STOLEN
    with pytest.raises(ValueError, match="htb"):
        shaper.build_commands("s1-eth0", "tbf", 10, 20000, 3028, kick_filter=True)
