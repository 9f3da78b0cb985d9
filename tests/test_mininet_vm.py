"""Mininet on the stock kernel (netem): runs only inside the VM stage, like tests/test_netem_vm.py.

`mn --custom topologies/mn_dumbbell.py` with netem delay on the access links, and the adapter over a
dumbbell whose delay backend is netem. Timing is judged against a path with zero delay measured in
the same run (the emulated guest adds 0.1-1 ms per hop, varying with the host's load): under mn the
same path with netem's delay set to 0, over the adapter a sibling host's undelayed path.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from bufsize.mininet.adapter import make_view
from bufsize.topologies.config import DumbbellConfig
from bufsize.topologies.dumbbell import Dumbbell

pytestmark = [pytest.mark.vm, pytest.mark.integration]
REPO = Path(__file__).resolve().parent.parent
CUSTOM = REPO / "topologies" / "mn_dumbbell.py"
RTT_MS = 20.0


def delayed_path(delayed: float, base: float) -> None:
    """The delay is there and the zero-delay path is not delayed: no reply comes before RTT_MS (a path
    with no delay, or the delay on one end only, fails), and the same path at delay 0 answers sooner.
    How close to RTT_MS it comes is the host's claim (vm-netem-rtts), not asserted under emulation."""
    assert delayed >= RTT_MS > base, (delayed, base)


@pytest.fixture(autouse=True)
def guest_only():
    if os.environ.get("BSZ_VM_GUEST") != "1":
        pytest.skip("runs only inside the VM stage (tests/vm/stage.sh, or make vm-test)")


def min_rtt(text: str) -> float:
    times = [float(t) for t in re.findall(r"time=([\d.]+) ms", text)]
    assert len(times) >= 3, text
    return min(times)


# On `node`, every netem qdisc's delay set to 0: the same path, hops and qdiscs, without the delay.
ZERO_DELAY = "{node} for d in $(tc qdisc show | awk '$2 == \"netem\" {{print $5}}'); do tc qdisc change dev $d root netem delay 0us; done\n"  # noqa: E501
PING = "h1 ping -c 5 -i 0.2 r1\n"


def mn_ping(topo_extra: str = "", script: str = "") -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """h1's min RTT to r1 with the topology's delay, then over the same path with every netem delay on
    h1's access link set to 0, in one Mininet session (each start takes half a minute under TCG).
    `script` runs between the two pings."""
    # s1 is the router, or with l2switch=1 Open vSwitch's bridge: the other end of h1's access link.
    zero = ZERO_DELAY.format(node="h1") + ZERO_DELAY.format(node="s1")
    res = subprocess.run(
        ["mn", "--custom", str(CUSTOM), "--topo", f"dumbbell,hosts=2,rtt_ms={RTT_MS:g},rate_mbps=5{topo_extra}"]
        + ["--controller", "none"],
        input=PING + script + zero + PING,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    # mn's CLI logs command output to stderr; each ping's replies end at its summary.
    parts = res.stderr.split("ping statistics")
    assert len(parts) == 3, res.stderr
    return min_rtt(parts[0]), min_rtt(parts[1]), res


@pytest.mark.extensive  # make vm-test; the test command runs the same dumbbell behind Mininet's OVS switch
def test_mn_custom_dumbbell_has_netem_delay_on_the_stock_kernel():
    delayed, base, _ = mn_ping()
    print(f"mn --custom: min RTT {delayed:.3f} ms at {RTT_MS:g}, {base:.3f} ms with the delay set to 0")
    delayed_path(delayed, base)


def test_mn_custom_dumbbell_behind_mininets_default_open_vswitch(ovs):
    # l2switch=1 and no --switch: the senders' LAN is Mininet's default switch, Open vSwitch (kernel
    # datapath, standalone), with the router g1 behind it and netem on the access links.
    look = "sh ovs-vsctl list-br\nsh ovs-vsctl get-fail-mode s1\ng1 tc qdisc show\n"
    delayed, base, res = mn_ping(",l2switch=1", look)
    print(f"mn --custom on OVS: min RTT {delayed:.3f} ms at {RTT_MS:g}, {base:.3f} ms with the delay set to 0")
    delayed_path(delayed, base)
    # `sh` prints to mn's stdout, after the CLI's prompts: "mininet> s1", "mininet> standalone".
    assert re.search(r"(^|> )s1$", res.stdout, re.M), res.stdout
    assert re.search(r"(^|> )standalone$", res.stdout, re.M), res.stdout
    assert re.search(r"qdisc bfifo 10: dev g1-eth\d+ parent 1:1 limit \d+b", res.stderr), res.stderr
    left = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True, check=True).stdout
    assert "s1" not in left.split(), left  # Mininet removed its bridge when it stopped


def test_adapter_over_a_netem_dumbbell(no_leftovers):
    # One dumbbell, h1 with no delay and h2 with RTT_MS: the same hops to r1, one of them delayed.
    cfg = DumbbellConfig(hosts=2, rtt_ms=[0.0, RTT_MS], rate_mbps=5.0, shaper="htb")  # netem: a kernel shaper
    with Dumbbell(cfg, "netem") as net, make_view(net) as view:
        assert "netem" in view.get("h2").cmd(f"tc qdisc show dev {net.hosts[1].dev}")
        base, delayed = (min_rtt(view.get(h).cmd(f"ping -n -c 5 -i 0.2 {net.receiver_ip}")) for h in ("h1", "h2"))
    print(f"adapter: min RTT {delayed:.3f} ms at {RTT_MS:g}, {base:.3f} ms at 0")
    delayed_path(delayed, base)
