"""Short-lived flows over a real dumbbell: every transfer recorded once, with what the kernel saw."""

from __future__ import annotations

import csv
import json
import os
import time
from collections import Counter

import pytest

from bufsize.topologies.config import DumbbellConfig
from bufsize.topologies.dumbbell import Dumbbell
from bufsize.traffic.shortflows import ShortFlows
from bufsize.traffic.workload import MSS_BYTES, Workload
from tests.conftest import bufsize

RTT_S = 0.02
LINK = ["--hosts", "3", "--rate-mbps", "20", "--rtt-ms", "20", "--cc", "reno", "--buffer-packets", "100"]


@pytest.mark.integration
def test_every_transfer_is_recorded_once_with_the_initial_window_asked(no_leftovers, tmp_path):
    out = tmp_path / "sf"
    res = bufsize(
        "shortflows", *LINK, "--sizes", "fixed:6", "--load", "0.3", "--users", "3", "--think-s", "0.05",
        "--transfers", "20", "--initcwnd", "4", "--warmup-s", "0", "--out", str(out), "--json", timeout=240,
    )  # fmt: skip
    assert res.returncode in (0, 3), res.stderr
    r = json.loads(res.stdout)
    # 20 open-loop arrivals and 20 transfers for each of 3 users: exactly 80, all done, none lost.
    assert r["transfers"]["all"] == {"started": 80, "done": 80, "failed": 0, "unfinished": 0}
    assert r["transfers"]["generator"]["counts"]["connections_without_transfer"] == 0
    with (out / "transfers.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert sorted(int(x["id"]) for x in rows) == list(range(1, 81))
    assert Counter(x["kind"] for x in rows) == {"open": 20, "closed": 60}
    assert Counter(x["user"] for x in rows if x["kind"] == "closed") == {"0": 20, "1": 20, "2": 20}
    # Open-loop arrivals go to the hosts in turn; user u lives on host u mod 3 + 1.
    assert Counter(x["host"] for x in rows if x["kind"] == "open") == {"h1": 7, "h2": 7, "h3": 6}
    assert {(x["user"], x["host"]) for x in rows if x["kind"] == "closed"} == {("0", "h1"), ("1", "h2"), ("2", "h3")}
    assert {int(x["size_bytes"]) for x in rows} == {6 * MSS_BYTES}
    assert {int(x["init_cwnd"]) for x in rows} == {4} and {int(x["mss"]) for x in rows} == {MSS_BYTES}
    # With an initial window of 4, six packets take two rounds after the handshake's: at least 2 RTT.
    fct = [float(x["fct_s"]) for x in rows]
    assert min(fct) >= 2 * RTT_S * 0.95, min(fct)
    for x in rows:
        assert float(x["t_start"]) <= float(x["t_connected"]) <= float(x["t_end"])
        assert float(x["t_connected"]) - float(x["t_start"]) >= RTT_S * 0.95  # the handshake's round trip
    assert r["fct_by_size"][0]["transfers"] == 80 and r["fct_by_size"][0]["packets"] == "6"
    assert r["transfers"]["initial_windows"] == {"4": 80}
    assert r["model"]["available"] and r["model"]["initial_window"] == 4
    assert r["drops"]["outside_bottleneck_total"] == 0
    for name in ("result.json", "transfers.csv", "queue.csv", "queue.png"):
        assert (out / name).exists(), name


@pytest.mark.integration
def test_a_capped_window_holds_each_transfer_to_that_many_packets_a_round_trip(no_leftovers, tmp_path):
    """Two users each send two 200-packet transfers from an initial window of 4, windows capped at
    4 packets: the receiver's clamp allows 4 packets a round trip, so each takes at least 50 RTTs
    (the handshake's and 49 windows, then half a round trip), where an uncapped one takes about 7
    (slow start from 4 is past 200 packets in six rounds)."""
    out = tmp_path / "capped"
    rtt_s = 0.04
    res = bufsize(
        "shortflows", "--hosts", "2", "--rate-mbps", "100", "--rtt-ms", "40", "--cc", "reno",
        "--buffer-packets", "300", "--sizes", "fixed:200", "--users", "2", "--think-s", "0.01", "--transfers", "2",
        "--initcwnd", "4", "--max-window", "4", "--warmup-s", "0", "--out", str(out), "--json", timeout=240,
    )  # fmt: skip
    assert res.returncode in (0, 3), res.stderr
    r = json.loads(res.stdout)
    assert r["transfers"]["all"] == {"started": 4, "done": 4, "failed": 0, "unfinished": 0}
    assert r["transfers"]["generator"]["window_cap"] == {"bytes": 4 * MSS_BYTES, "kept": 4, "lost": 0}
    assert r["options"]["max_window"] == 4
    fct = sorted(float(x["fct_s"]) for x in csv.DictReader((out / "transfers.csv").open()))
    assert fct[0] >= (200 / 4) * rtt_s * 0.95, fct


@pytest.mark.integration
def test_stopping_mid_transfer_records_the_unfinished(no_leftovers):
    cfg = DumbbellConfig(hosts=2, rate_mbps=20, rtt_ms=[20.0, 20.0])
    # Four users sending 2 MB back to back: at 20 Mb/s each transfer takes a few seconds, so some
    # are always running when the generator is stopped with no grace.
    w = Workload(sizes="fixed:2MB", users=4, think_s=0, duration_s=600, seed=2)
    with Dumbbell(cfg, "delayline") as net:
        sf = ShortFlows(net, w, net.state.ports().stop - 1, grace_s=0)
        sf.start()
        pid = sf.proc.pid
        time.sleep(3.0)
        sf.check_process()
        rec = sf.stop()
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    c = rec.summary["counts"]
    assert c["started"] == len(rec.rows) == c["done"] + c["failed"] + c["unfinished"]
    assert c["unfinished"] >= 1 and c["failed"] == 0
    assert rec.summary["stopped_early"] is True
    for x in rec.rows:
        if x["status"] == "done":
            assert x["size_bytes"] == 2_000_000 and x["fct_s"] > 0
        else:
            assert x["status"] == "unfinished" and x["fct_s"] != x["fct_s"]  # nan: it never ended


@pytest.mark.integration
def test_short_flows_beside_long_flows(no_leftovers, tmp_path):
    res = bufsize(
        "shortflows", *LINK, "--flows", "4", "--long-warmup-s", "1", "--sizes", "exp:8", "--load", "0.1",
        "--duration", "6", "--warmup-s", "1", "--out", str(tmp_path / "mix"), "--json", timeout=240,
    )  # fmt: skip
    assert res.returncode in (0, 3), res.stderr
    r = json.loads(res.stdout)
    assert r["flows"] == 4 and r["long_flows"] == 4
    t = r["long_flow_throughput"]
    assert t["flows"] == 4 and t["min_mbps"] > 0
    # Long flows and short ones share the link: the long ones carry most of what was sent.
    assert 0 < t["mean_mbps"] * 4 / (r["utilization"] * 20) <= 1.02
    assert r["flows_in_congestion_avoidance"]["snapshots"] >= 4
    assert r["flows_in_congestion_avoidance"]["max"] <= 4 and r["flows_in_congestion_avoidance"]["active_mean"] > 0
    a = r["transfers"]["all"]
    assert a["started"] == a["done"] + a["failed"] + a["unfinished"] and a["done"] > 10
    assert r["model"]["available"] is False


@pytest.mark.integration
def test_fig10_series_runs_resumes_and_tabulates(no_leftovers, tmp_path):
    out = tmp_path / "fig10"
    args = ["shortexp", "fig10", "--out", str(out), "--rates", "10", "--lengths", "4", "--duration", "3",
            "--hosts", "2"]  # fmt: skip
    res = bufsize(*args, timeout=240)
    assert res.returncode == 0, res.stderr
    assert "1 of 1 points finished" in res.stdout
    r = json.loads((out / "r10-l4" / "result.json").read_text())
    assert r["transfers"]["initial_windows"] == {"2": r["transfers"]["all"]["started"]}
    assert r["model"]["available"] and r["transfers"]["in_window"]["done"] > 20
    table = (out / "table.md").read_text()
    assert "| 10 | 4 | 2 |" in table and (out / "figure.png").exists()
    again = bufsize(*args, timeout=60)  # finished points are kept, not rerun
    assert again.returncode == 0 and "[1/1]" not in again.stderr, again.stderr
    other = bufsize(*args[:-2], "--hosts", "3", timeout=60)
    assert other.returncode != 0 and "other settings" in other.stderr


@pytest.mark.integration
def test_buffer_ladder_measures_each_step_in_place(no_leftovers, tmp_path):
    res = bufsize(
        "shortflows", *LINK, "--sizes", "fixed:14", "--load", "0.8", "--initcwnd", "2", "--warmup-s", "1",
        "--ladder", "30,5", "--ladder-window-s", "3", "--duration", "17", "--out", str(tmp_path / "l"), "--json",
        timeout=240,
    )  # fmt: skip
    assert res.returncode in (0, 3), res.stderr
    r = json.loads(res.stdout)
    steps = r["ladder"]
    assert [s["buffer_packets"] for s in steps] == [30, 5]
    for s in steps:
        assert s["window_seconds"] > 0 and s["transfers"]["started"] > 0
        assert s["queue"]["max_bytes"] <= s["buffer_packets"] * 1514  # bfifo's limit, in bytes
    assert steps[1]["loss_rate"] > steps[0]["loss_rate"] >= 0  # 14-packet bursts into 5 packets: drops
    assert r["queue"]["max_bytes"] <= 100 * 1514 and steps[1]["queue"]["max_bytes"] < steps[0]["queue"]["max_bytes"]
