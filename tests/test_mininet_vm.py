"""Mininet on the stock kernel (netem): runs only inside the VM stage, like tests/test_netem_vm.py.

`mn --custom topologies/mn_dumbbell.py` with netem delay on the access links, and the adapter over a
dumbbell whose delay backend is netem. Timing is judged against the same path with zero delay,
measured in the same run (the emulated guest adds 0.1-1 ms per hop, varying with the host's load).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from bufsize.topologies.config import DumbbellConfig
from bufsize.topologies.dumbbell import Dumbbell
from bufsize.topologies.mininet_adapter import make_view

pytestmark = [pytest.mark.vm, pytest.mark.integration]
REPO = Path(__file__).resolve().parent.parent
CUSTOM = REPO / "topologies" / "mn_dumbbell.py"
RTT_MS = 20.0
# 3 % of the RTT plus 4 ms: the cap test_netem_vm.py allows for the guest's noise, far below a
# fault that matters here (no delay at all, or the delay applied once instead of on both ends).
ALLOWED_MS = 0.03 * RTT_MS + 4.0


@pytest.fixture(autouse=True)
def guest_only():
    if os.environ.get("BSZ_VM_GUEST") != "1":
        pytest.skip("runs only inside the VM stage (tests/vm/stage.sh, or make vm-test)")


def min_rtt(text: str) -> float:
    times = [float(t) for t in re.findall(r"time=([\d.]+) ms", text)]
    assert len(times) >= 3, text
    return min(times)


def mn_ping(rtt_ms: float, topo_extra: str = "", script: str = "") -> tuple[float, subprocess.CompletedProcess[str]]:
    res = subprocess.run(
        ["mn", "--custom", str(CUSTOM), "--topo", f"dumbbell,hosts=2,rtt_ms={rtt_ms:g},rate_mbps=5{topo_extra}"]
        + ["--controller", "none"],
        input="h1 ping -c 5 -i 0.2 r1\n" + script,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    return min_rtt(res.stderr), res  # mn's CLI logs command output to stderr


def test_mn_custom_dumbbell_has_netem_delay_on_the_stock_kernel():
    (base, _), (delayed, _) = mn_ping(0), mn_ping(RTT_MS)
    print(f"mn --custom: min RTT {delayed:.3f} ms at {RTT_MS:g}, {base:.3f} ms at 0")
    assert abs((delayed - base) - RTT_MS) <= ALLOWED_MS, (delayed, base)


def test_mn_custom_dumbbell_behind_mininets_default_open_vswitch(ovs):
    # l2switch=1 and no --switch: the senders' LAN is Mininet's default switch, Open vSwitch (kernel
    # datapath, standalone), with the router g1 behind it and netem on the access links.
    look = "sh ovs-vsctl list-br\nsh ovs-vsctl get-fail-mode s1\ng1 tc qdisc show\n"
    (base, _), (delayed, res) = mn_ping(0, ",l2switch=1"), mn_ping(RTT_MS, ",l2switch=1", look)
    print(f"mn --custom on OVS: min RTT {delayed:.3f} ms at {RTT_MS:g}, {base:.3f} ms at 0")
    assert abs((delayed - base) - RTT_MS) <= ALLOWED_MS, (delayed, base)
    # `sh` prints to mn's stdout, after the CLI's prompts: "mininet> s1", "mininet> standalone".
    assert re.search(r"(^|> )s1$", res.stdout, re.M), res.stdout
    assert re.search(r"(^|> )standalone$", res.stdout, re.M), res.stdout
    assert re.search(r"qdisc bfifo 10: dev g1-eth\d+ parent 1:1 limit \d+b", res.stderr), res.stderr
    left = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True, check=True).stdout
    assert "s1" not in left.split(), left  # Mininet removed its bridge when it stopped


def test_adapter_over_a_netem_dumbbell(no_leftovers):
    def view_ping(rtt: float) -> float:
        cfg = DumbbellConfig(hosts=2, rtt_ms=[rtt, rtt], rate_mbps=5.0, shaper="htb")  # netem: a kernel shaper
        with Dumbbell(cfg, "netem") as net, make_view(net) as view:
            assert "netem" in view.get("h1").cmd(f"tc qdisc show dev {net.hosts[0].dev}") or rtt == 0
            return min_rtt(view.get("h1").cmd(f"ping -n -c 5 -i 0.2 {net.receiver_ip}"))

    base, delayed = view_ping(0.0), view_ping(RTT_MS)
    print(f"adapter: min RTT {delayed:.3f} ms at {RTT_MS:g}, {base:.3f} ms at 0")
    assert abs((delayed - base) - RTT_MS) <= ALLOWED_MS, (delayed, base)
