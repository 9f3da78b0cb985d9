"""Long-lived flows: split, establishment, data on every flow, congestion control, clear failures."""

from __future__ import annotations

import os
import re
import time

import pytest
from conftest import in_ns

from bufsize.topologies.config import DumbbellConfig
from bufsize.topologies.dumbbell import Dumbbell
from bufsize.topologies.errors import RunError, UsageError
from bufsize.traffic.longflows import LongFlows, hold_s, split_flows


def test_flows_split_evenly_over_hosts():
    assert split_flows(50, 10) == [5] * 10
    assert split_flows(7, 3) == [3, 2, 2]
    assert split_flows(2, 4) == [1, 1, 0, 0]
    for bad in (0, 801):
        with pytest.raises(UsageError, match=f"--flows {bad}"):
            split_flows(bad, 2)


def test_the_hold_covers_the_slowest_establishment_measured():
    """Each (flows, hosts, largest RTT) with the slowest time to all established a committed run logged:
    the common first write must fall after it, with a margin for a busier machine."""
    for flows, hosts, rtt_s, slowest in ((400, 400, 0.127, 11.84), (400, 400, 0.087, 8.94), (800, 400, 0.087, 9.38),
                                         (200, 200, 0.087, 4.4), (50, 50, 0.087, 1.11)):  # fmt: skip
        assert hold_s(flows, hosts, rtt_s) > 1.25 * slowest, (flows, hosts)
    assert hold_s(2, 2, 0.087) < 2  # small runs do not wait for nothing


def bytes_received_per_flow(net: Dumbbell) -> list[int]:
    out = in_ns(net.receiver_ns, "ss", "-Htin", "state", "established", f"( sport = :{net.state.ports().start} )")
    return [int(m) for m in re.findall(r"bytes_received:(\d+)", out)]


@pytest.mark.integration
def test_50_flows_over_10_hosts_establish_and_all_carry_data(no_leftovers):
    # The paper's link: a BDP of 449 packets plus as much buffer, ~18 packets per flow, so no flow
    # is starved into repeated timeouts (with ~1 packet per flow some legitimately would be).
    cfg = DumbbellConfig(hosts=10, rtt_ms=[87.0] * 10)
    with Dumbbell(cfg, "delayline") as net, LongFlows(net, 50) as flows:
        info = flows.start_info
        assert info.established == 50 and info.held_until_all_up
        time.sleep(3)
        flows.check()
        per_flow = bytes_received_per_flow(net)
        # Every flow carried data (how fully they keep the link busy is a claim: tests/claims busy-800).
        assert len(per_flow) == 50
        assert min(per_flow) > 10_000, f"a flow carried almost nothing: {sorted(per_flow)[:5]}"
        assert flows.congestion_controls() == {"reno": 50}


@pytest.mark.integration
@pytest.mark.parametrize("tool", ["iperf", "iperf3"])
def test_congestion_control_in_use_is_the_one_asked_for(no_leftovers, tool):
    cfg = DumbbellConfig(hosts=2, rate_mbps=20, rtt_ms=[10.0, 10.0], cc="cubic")
    with Dumbbell(cfg, "delayline") as net, LongFlows(net, 6, tool) as flows:
        assert flows.start_info.established == 6
        ccs = flows.congestion_controls()
        assert set(ccs) == {"cubic"} and ccs["cubic"] >= 6
        flows.check()


@pytest.mark.integration
def test_refused_connections_give_a_clear_error_not_a_hang(no_leftovers, monkeypatch):
    # A "server" that never listens: every connect is answered with a reset.
    monkeypatch.setattr(LongFlows, "_server_argv", lambda self, port: ["sleep", "120"])
    monkeypatch.setattr(LongFlows, "_wait_listening", lambda self, ports, timeout=10.0: None)
    cfg = DumbbellConfig(hosts=2, rate_mbps=20, rtt_ms=[5.0, 5.0])
    t0 = time.monotonic()
    with Dumbbell(cfg, "delayline") as net, pytest.raises(RunError, match=r"only 0 of 4 flows established"):
        with LongFlows(net, 4):
            pass
    assert time.monotonic() - t0 < 60


@pytest.mark.integration
def test_a_flow_that_dies_is_reported(no_leftovers):
    cfg = DumbbellConfig(hosts=2, rate_mbps=20, rtt_ms=[5.0, 5.0])
    with Dumbbell(cfg, "delayline") as net, LongFlows(net, 4) as flows:
        flows.check()
        flows.clients[0].kill()
        flows.clients[0].wait()
        with pytest.raises(RunError, match="exited"):
            flows.check()


@pytest.mark.integration
def test_timer_slack_reaches_every_thread_of_a_running_process(root):
    """iperf 2's threads get their slack after start-up (LongFlows.start); each thread has its own."""
    import subprocess
    import sys

    from bufsize.topologies.proc import set_timer_slack

    code = "import threading, time\n"
    code += "for _ in range(3): threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
    code += "print('up', flush=True); time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        tids = os.listdir(f"/proc/{proc.pid}/task")
        assert len(tids) == 4
        assert set_timer_slack(proc.pid, 50_000_000) == 4
        assert {open(f"/proc/{t}/timerslack_ns").read().strip() for t in tids} == {"50000000"}
    finally:
        proc.kill()
        proc.wait()
    assert set_timer_slack(proc.pid, 1) == 0  # gone: nothing to change, no error
