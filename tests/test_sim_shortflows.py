"""Short transfers on the ns-3 twin (issue 34, item 5): transfers complete with the bytes and times
they must, closed-loop users wait for their transfers, the loss experiment runs point for point like
the emulated one, and bad transfers are refused. No root: nothing is built on the machine."""

from __future__ import annotations

import csv
import json
import math
import subprocess
from dataclasses import asdict

import pytest
from conftest import BUFSIZE

from bufsize.shortflows.loss import LossSpec
from bufsize.sim.shortexp import open_transfers, user_cycles
from bufsize.topologies.errors import RunError, UsageError
from bufsize.topologies.nssim import SimConfig, SimDumbbell
from bufsize.traffic.workload import MSS_BYTES, Workload, wire_bytes

RATE, RTT = 10.0, 20.0  # Mb/s, ms


def link(hosts: int = 2, seed: int = 1) -> SimConfig:
    return SimConfig(hosts=hosts, rate_mbps=RATE, rtt_ms=[RTT] * hosts, cc="reno", seed=seed)


def serialisation_s(size_bytes: int) -> float:
    return wire_bytes(size_bytes) * 8 / (RATE * 1e6)


def test_open_loop_transfers_complete_no_faster_than_the_path_allows():
    """On an idle link with a large buffer, every transfer completes, and its completion time is at
    least the handshake and the data's flight (1.5 RTT, as the receiver sees the last byte) plus
    its time on the wire, and at most that plus the slow-start rounds a 10-packet first window needs."""
    sizes = [1, 10, 14 * MSS_BYTES, 100 * MSS_BYTES]
    with SimDumbbell(link(), 0, 1000, short_flows=True) as net:
        for i, size in enumerate(sizes):
            net.add_transfer(1.0 + i, i % 2, size)  # a second apart: none meets another
        net.run(6.0)
        rows = net.transfers()
    assert [r.size_bytes for r in rows] == sizes
    assert [r.host for r in rows] == [0, 1, 0, 1]
    for r in rows:
        assert r.done is not None and r.fct_s is not None, r
        floor = 1.5 * RTT / 1000 + serialisation_s(r.size_bytes) * 0.5
        rounds = max(1, math.ceil(math.log2(r.size_bytes / MSS_BYTES / 10 + 1)) + 1)
        assert floor <= r.fct_s <= (1.5 + rounds) * RTT / 1000 + 2 * serialisation_s(r.size_bytes) + 0.05, r


def test_a_closed_loop_user_starts_each_transfer_after_the_last_completes_and_thinks():
    cycles = [(0.5, 20 * MSS_BYTES), (0.25, 5 * MSS_BYTES), (1.0, 50 * MSS_BYTES), (0.1, 1000)]
    with SimDumbbell(link(), 0, 1000, short_flows=True) as net:
        net.add_user(1, 100.0, cycles)
        net.run(10.0)
        rows = net.transfers()
    assert [r.size_bytes for r in rows] == [b for _, b in cycles]
    assert rows[0].start == pytest.approx(0.5, abs=1e-6)
    for prev, (think, _), nxt in zip(rows, cycles[1:], rows[1:], strict=False):
        assert prev.done is not None
        assert nxt.start == pytest.approx(prev.done + think, abs=1e-6)


def test_a_user_starts_nothing_after_its_end_time():
    with SimDumbbell(link(), 0, 1000, short_flows=True) as net:
        net.add_user(0, 1.2, [(0.5, 1000), (0.5, 1000), (5.0, 1000)])
        net.run(10.0)
        rows = net.transfers()
    assert len(rows) == 2  # the third would start near 6 s, past 1.2 s


def test_long_and_short_flows_share_the_bottleneck_and_a_small_buffer_drops():
    """Ten long flows plus open-loop transfers at 3 packets: drops happen, the short transfers still
    complete (retransmitted), and the long flows keep the link busy."""
    with SimDumbbell(link(hosts=2), 10, 3, short_flows=True) as net:
        for k in range(20):
            net.add_transfer(2.0 + 0.2 * k, k % 2, 14 * MSS_BYTES)
        net.run(2.0)
        iv = net.run(8.0)
        rows = net.transfers()
        up = net.flows_up()
    assert up == 10
    assert iv.drops > 0 and iv.queue_max <= 3
    assert iv.rate_mbps > 0.8 * RATE
    assert len(rows) == 20 and all(r.done is not None for r in rows)


def test_transfers_the_helper_refuses():
    with SimDumbbell(link(), 0, 100, short_flows=True) as net:
        net.run(1.0)
        for bad in ("transfer 0.5 0 1000", "transfer 2 5 1000", "transfer 2 0 0", "user 0 10", "user 9 10 1 100",
                    "user 0 10 -1 100", "transfer x"):  # fmt: skip
            with pytest.raises(RunError, match="refused"):
                net._send(bad)
        net.add_transfer(2.0, 1, 1000)  # still running after the refusals
        net.run(2.0)
        assert net.transfers()[0].done is not None


def test_no_long_flows_needs_short_flows():
    with pytest.raises(UsageError, match="--flows 0"):
        SimDumbbell(link(), 0, 100)


def test_the_twin_offers_the_emulated_generators_workload():
    """The open-loop arrivals hit the offered load, go round the hosts, and repeat for a seed; a
    user's cycles cover the duration even if no transfer took time."""
    w = Workload(sizes="expmix:0.5@15+0.35@50+0.15@200", load=0.5, duration_s=200.0, seed=3)
    arrivals = open_transfers(w, 18, 50.0)
    assert arrivals == open_transfers(w, 18, 50.0)
    assert [h for _, h, _ in arrivals[:20]] == [k % 18 for k in range(20)]
    load = sum(wire_bytes(b) for _, _, b in arrivals) * 8 / 200.0 / 50e6
    assert load == pytest.approx(0.5, rel=0.15)
    assert all(0 < t <= 200.0 for t, _, _ in arrivals)
    cl = Workload(sizes="fixed:14", users=3, think_s=5.0, duration_s=60.0, seed=3)
    cycles = user_cycles(cl, 0)
    assert sum(t for t, _ in cycles) > 60.0 and sum(t for t, _ in cycles[:-1]) <= 60.0
    assert cycles != user_cycles(cl, 1)


@pytest.mark.slow  # tens of seconds of simulation: make test, not make fast
def test_sim_loss_experiment_runs_resumes_and_compares(tmp_path):
    """The loss experiment's open-loop workload at two buffers: loss falls with the buffer, the
    emulated report's table is written, a re-run skips finished points, and --beside refuses a
    directory that is not a loss series run with the same settings."""
    out = tmp_path / "twin"
    args = [BUFSIZE, "sim", "shortexp", "loss", "--workloads", "O", "--buffers", "10,250", "--duration", "25",
            "--out", str(out)]  # fmt: skip
    first = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    with (out / "table.csv").open() as f:
        rows = {int(r["buffer_packets"]): r for r in csv.DictReader(f)}
    assert set(rows) == {10, 250}
    assert float(rows[10]["loss_rate"]) > float(rows[250]["loss_rate"])
    r10 = json.loads((out / "O-b10" / "result.json").read_text())
    assert r10["kind"] == "sim-shortflows" and r10["manifest"]["simulator"] == "ns-3"
    counted = r10["transfers"]["in_window"]
    assert counted["done"] > 100 and counted["failed"] == 0  # the twin has no transfer timeout
    assert counted["done"] + counted["unfinished"] == counted["started"]  # the emulated shortflows' keys
    assert 0.5 < r10["transfers"]["offered_load_in_window"] < 1.2
    again = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "[1/2]" not in again.stderr, again.stderr
    other = tmp_path / "other"
    other.mkdir()
    (other / "series.json").write_text(json.dumps({"experiment": "loss", "spec": asdict(LossSpec())}))
    refused = subprocess.run([*args, "--beside", str(other)], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "other settings" in refused.stderr, refused.stderr


def test_a_smaller_initial_window_takes_more_rounds():
    """A 40-packet transfer on an idle link: from 10 packets it needs 2 more rounds after the first
    (10, 20, 40), from 2 packets 4 more (2, 4, 8, 16, 32): at least two RTTs longer."""
    fct = {}
    for iw in (10, 2):
        with SimDumbbell(SimConfig(2, RATE, [RTT] * 2, "reno", iw=iw), 0, 1000, short_flows=True) as net:
            net.add_transfer(0.5, 0, 40 * MSS_BYTES)
            net.run(3.0)
            fct[iw] = net.transfers()[0].fct_s
    assert fct[2] >= fct[10] + 2 * RTT / 1000, fct


def test_the_ns2_rto_waits_longer_in_timeouts():
    """Forty long flows on a 2-packet buffer live in timeouts; with ns-2's 1 s minimum RTO they wait
    longer in each, so they send fewer packets and lose fewer than with Linux's 200 ms."""
    seen = {}
    for rto in ("linux", "ns2"):
        cfg = SimConfig(4, RATE, [RTT] * 4, "reno", rto=rto)
        with SimDumbbell(cfg, 40, 2) as net:
            net.run(5.0)
            iv = net.run(20.0)
        seen[rto] = iv
    assert seen["ns2"].drops < seen["linux"].drops, seen
    assert seen["ns2"].packets + seen["ns2"].drops < seen["linux"].packets + seen["linux"].drops, seen


def test_twin_tcp_options_refused():
    with pytest.raises(UsageError, match="--iw"):
        SimDumbbell(SimConfig(2, RATE, [RTT] * 2, "reno", iw=0), 2, 10)
    with pytest.raises(UsageError, match="--rto"):
        SimDumbbell(SimConfig(2, RATE, [RTT] * 2, "reno", rto="bsd"), 2, 10)


@pytest.mark.slow  # tens of seconds of simulation: make test, not make fast
def test_sim_mix_experiment_runs_with_its_own_initial_window(tmp_path):
    """Appenzeller 2004 Figs 13-14 at n = 10 on the twin: both buffers measured, the 14-packet flows'
    completion times reported per size, the series' initial window (2) in the manifest, and the
    short flows finish sooner at RTT*C/sqrt(n) than at RTT*C (a queue a third as long)."""
    out = tmp_path / "mix"
    args = [BUFSIZE, "sim", "shortexp", "mix", "--long-flows", "10", "--duration", "10", "--out", str(out)]
    run = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    with (out / "table.csv").open() as f:
        rows = {r["buffer"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"sqrtn", "bdp"}
    assert int(rows["sqrtn"]["buffer_packets"]) < int(rows["bdp"]["buffer_packets"])
    assert float(rows["sqrtn"]["afct_s"]) < float(rows["bdp"]["afct_s"])
    r = json.loads((out / "n10-sqrtn" / "result.json").read_text())
    assert "IW 2," in r["manifest"]["tcp"] and r["config"]["iw"] == 2
    assert r["fct_by_size"][0]["packets"] == "14" and r["fct_by_size"][0]["transfers"] > 50
    wrong = subprocess.run([*args, "--buffers", "5"], capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 2 and "does not take --buffers" in wrong.stderr, wrong.stderr
