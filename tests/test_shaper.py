"""The bottleneck tree's shape, as tc batch lines."""

from topologies import shaper


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
