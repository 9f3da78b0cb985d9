"""The ns-3 twin (issue 34): it builds, simulates the dumbbell it claims to, answers deterministically
for a seed, spreads across seeds, and leaves no process behind. No root: nothing is built on the machine."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import statistics
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from conftest import BUFSIZE, killed_if_left

from bufsize.longlived.search import SearchOptions, run_search
from bufsize.scaffold.runs import Simulated
from bufsize.topologies.errors import RunError, UsageError
from bufsize.topologies.nssim import HELPER, NS3_WHEEL, SimConfig, SimDumbbell, ns3_version, twin_ready

REPO = Path(__file__).resolve().parents[1]
# The small search: N = 10 over 10 Mb/s and 20 ms (a pipe of 16.5 packets).
SMALL = {"rate_mbps": 10.0, "rtt_ms": 20.0}


def small(seed: int, flows: int = 10, cc: str = "reno") -> SimConfig:
    return SimConfig(hosts=flows, rate_mbps=SMALL["rate_mbps"], rtt_ms=[SMALL["rtt_ms"]] * flows, cc=cc, seed=seed)


def search(seed: int, **kw: object) -> dict:
    return run_search(small(seed), Simulated(None, lambda s: None), SearchOptions(flows=10, **kw))  # type: ignore[arg-type]


def test_twin_is_built_against_the_pinned_ns3():
    assert twin_ready(), "setup.sh installs the ns3 wheel and builds topologies/nssim/bsz-nssim"
    assert ns3_version() == NS3_WHEEL.split("==")[1].split(".post")[0]
    setup = (REPO / "setup.sh").read_text()
    assert f"NS3_WHEEL={NS3_WHEEL}" in setup  # setup installs the wheel the code names


def test_bottleneck_carries_its_rate_in_ethernet_frames_and_its_buffer_caps_the_queue():
    """At a large buffer the link is full: bytes over time are C counted in 1514-byte frames, as the
    emulation's interface counters count them. At 3 packets the backlog never exceeds 3, and drops
    happen; the limit changes in place (packets already queued stay, as with bfifo)."""
    with SimDumbbell(small(1), 10, 40) as net:
        net.run(3.0)
        full = net.run(5.0)
        assert full.rate_mbps == pytest.approx(10.0, rel=0.002)
        assert full.queue_max <= 40 and full.queue_mean > 5
        net.set_buffer(3)
        net.run(2.0)
        tight = net.run(5.0)
        assert tight.queue_max <= 3 and tight.drops > 0
        # The senders' counters (read as the emulation reads Linux's): every drop is sent again (bar
        # those too near either end), and the segments sent are the frames carried plus those
        # dropped, give or take what was in flight at either end (a 16.5-packet pipe, 40 queued).
        # The 3-packet buffer leaves windows too small for three duplicate ACKs: more timeouts.
        for iv in (full, tight):
            assert abs(iv.tcp["retrans_segs"] - iv.drops) <= 0.05 * iv.drops + 20, (iv.tcp, iv.drops)
            assert abs(iv.tcp["out_segs"] - iv.packets - iv.drops) <= 60, (iv.tcp, iv.packets, iv.drops)
            assert iv.tcp["recoveries"] > 0
        assert tight.tcp["timeouts"] / tight.drops > 2 * full.tcp["timeouts"] / full.drops, (full.tcp, tight.tcp)
        assert len(tight.drop_times) > 0 and all(tight.t0 <= t <= tight.t1 for t in tight.drop_times)
        assert net.flows_up() == 10
        pid = net.proc.pid
    assert net.proc is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # reaped: nothing left running


def test_same_seed_same_search_and_another_seed_another_run():
    a, b = search(1), search(1)
    assert a["buffer_packets"] == b["buffer_packets"]
    lo, hi = a["uncertain_interval_packets"] or [a["buffer_packets"]] * 2
    assert lo <= b["buffer_packets"] <= hi
    assert a["measurements"] == b["measurements"]  # every sample, not only the answer
    c = search(2)
    assert [m["utilization"] for m in c["measurements"]] != [m["utilization"] for m in a["measurements"]]
    assert a["manifest"]["simulator"] == "ns-3" and a["manifest"]["seed"] == 1 and c["manifest"]["seed"] == 2


@pytest.mark.slow  # tens of seconds of simulation: make test, not make fast
def test_seeds_spread_like_the_emulation_and_answer_near_the_model():
    """Five seeds: every search valid and converged, the answers' CV within the emulation's committed
    range doubled (0-12 %; a 4-packet answer moves 25 % a packet), and the median within a factor 2
    of RTT*C/sqrt(N) (5.2 packets), as Reno's answers on the emulated line are (1.1-1.65 x)."""
    answers = []
    for seed in range(1, 6):
        r = search(seed)
        assert r["valid"], r["flags"]
        answers.append(r["buffer_packets"])
    cv = statistics.pstdev(answers) / statistics.mean(answers)
    assert cv <= 0.25, answers
    assert 0.5 * 5.2 <= statistics.median(answers) <= 2 * 5.2, answers


def test_fresh_starts_measure_each_buffer_in_a_run_of_its_own():
    """With fresh starts, each probe at a buffer other than the last one's starts a new simulator (its
    clock starts again, its seed its own); without, one run goes on. The search is still a search."""
    opts = SearchOptions(flows=10)
    fresh = run_search(small(1), Simulated(None, lambda s: None, fresh_starts=True), opts)
    moved = [m for prev, m in zip(fresh["measurements"], fresh["measurements"][1:], strict=False)
             if m["buffer_packets"] != prev["buffer_packets"]]  # fmt: skip
    assert fresh["fresh_starts"] == 2 + len(moved)  # the search's own run, the first probe's, each move
    first = fresh["measurements"][0]["t_start"]
    assert moved and all(m["t_start"] <= first + 1 for m in moved)  # each a fresh clock: warm-up and settle
    assert fresh["valid"] and fresh["flags"]["flows_held_until_all_up"]
    one = run_search(small(1), Simulated(None, lambda s: None), opts)
    starts = [m["t_start"] for m in one["measurements"]]
    assert one["fresh_starts"] == 0 and starts == sorted(starts) and starts[-1] > first + 10
    assert abs(fresh["buffer_packets"] - one["buffer_packets"]) <= 2  # the same link, near the same answer


def test_precision_rule_runs_on_the_twin():
    r = search(3, precision=0.2, samples=3)
    assert r["stopping_rule"] == "precision" and r["crossing"] is not None
    assert r["simulated_seconds"] > r["wall_seconds"]  # faster than real time at this scale


def test_fast_paths_change_the_time_a_simulation_takes_not_the_simulation():
    """--fast-paths 1 (the default) replaces ns-3's per-packet walks (the router's own-address check,
    route lookup, the receiver's endpoint demultiplexing) with a hash table each. The same run with
    them off must print every line the same: several long flows per host, spread RTTs,
    a tight buffer that drops, open-loop transfers and a closed-loop user whose connections come and
    go (each opens an endpoint and frees it, which the endpoint cache must forget), and the arrivals."""
    hosts = 12
    rtts = ",".join(str(20 + 7 * h) for h in range(hosts))
    script = ["run 2", "buffer 4", "run 1.5", *(f"transfer {3.6 + 0.05 * i} {i % hosts} {3000 + 5000 * i}"
              for i in range(30)), "user 3 6 0.1 20000 0.2 4000 0.05 90000", "run 2.5", "arrivals 0.5",
              "buffer 60", "run 1", "transfers", "status", "quit"]  # fmt: skip
    out = {}
    for fast in ("0", "1"):
        args = [str(HELPER), "--flows", "36", "--hosts", str(hosts), "--rate-mbps", "20", "--rtt-ms", rtts,
                "--buffer-packets", "30", "--cc", "cubic", "--fast-paths", fast]  # fmt: skip
        res = subprocess.run(args, input="\n".join(script) + "\n", capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        out[fast] = res.stdout.splitlines()
    replies = [json.loads(line) for line in out["1"]]
    assert not any("error" in r for r in replies), replies
    drops = sum(r.get("drops", 0) for r in replies)
    transfers = next(r["transfers"] for r in replies if "transfers" in r)
    assert drops > 100 and sum(t[3] >= 0 for t in transfers) >= 15  # drops, and endpoints came and went
    assert out["0"] == out["1"]


def test_start_spread_sets_when_the_flows_start_and_is_recorded():
    """Over the default 1 s spread, ten flows have not all started 0.2 s in; with no spread every one
    has delivered data by then (a 20 ms RTT; the ten first windows, 100 packets, fit the 200-packet
    buffer and pass in 120 ms). The setting is passed to the helper and is in the config a result
    records."""
    up = {}
    for spread in (1.0, 0.0):
        cfg = SimConfig(10, 10.0, [20.0] * 10, start_spread_s=spread)
        with SimDumbbell(cfg, 10, 200) as net:
            assert net.args()[net.args().index("--start-spread-s") + 1] == repr(spread)
            net.run(0.2)
            up[spread] = net.flows_up()
        assert cfg.to_dict()["start_spread_s"] == spread
    assert up[0.0] == 10 and up[1.0] < 10, up
    with pytest.raises(UsageError, match="--start-spread-s"):
        SimDumbbell(SimConfig(1, 10.0, [20.0], start_spread_s=-1.0), 1, 10)


def test_helper_refuses_bad_arguments_and_commands():
    res = subprocess.run([str(HELPER), "--flows", "2", "--hosts", "2", "--cc", "vegas"], capture_output=True, text=True)
    assert res.returncode == 2 and "--cc vegas" in res.stderr
    res = subprocess.run([str(HELPER), "--flows", "1", "--hosts", "2"], capture_output=True, text=True)
    assert res.returncode == 2 and "more hosts than flows" in res.stderr
    res = subprocess.run([str(HELPER), "--flows", "nan"], capture_output=True, text=True)
    assert res.returncode == 2
    res = subprocess.run([str(HELPER), "--flows", "2", "--hosts", "2", "--delack", "3"], capture_output=True, text=True)
    assert res.returncode == 2 and "--delack 3" in res.stderr
    res = subprocess.run([str(HELPER), "--flows", "2", "--fast-paths", "2"], capture_output=True, text=True)
    assert res.returncode == 2 and "--fast-paths 2" in res.stderr
    res = subprocess.run([str(HELPER), "--flows", "2", "--hosts", "2", "--rtt-ms", "20"], input="buffer 0\nrun -1\n"
                         "frobnicate\nquit\n", capture_output=True, text=True, timeout=30)  # fmt: skip
    replies = [json.loads(line) for line in res.stdout.splitlines()]
    assert res.returncode == 0 and [("error" in r) for r in replies] == [False, True, True, True]


def test_an_ns3_attribute_reaches_the_simulation_and_an_unknown_one_is_refused(tmp_path):
    """One cubic flow's first seconds into a large buffer: with HyStart off, slow start runs on until
    the buffer overflows, so the bottleneck drops far more than where HyStart left slow start early
    (338 drops against 14 at seed 1).
    A name ns-3 does not know stops the simulator before it runs; a malformed one never starts it."""

    def first_seconds(*attributes: str) -> tuple[int, int]:
        cfg = SimConfig(1, 10.0, [40.0], "cubic", attributes=attributes)
        with SimDumbbell(cfg, 1, 200) as net:
            iv = net.run(6.0)
        return iv.drops, iv.bytes

    hystart, plain = first_seconds(), first_seconds("ns3::TcpCubic::HyStart=false")
    assert plain[0] > 5 * max(1, hystart[0]), (hystart, plain)
    with pytest.raises(RunError, match="ns3::TcpCubic::NoSuchThing"):
        first_seconds("ns3::TcpCubic::NoSuchThing=1")
    res = subprocess.run([BUFSIZE, "sim", "measure", "--flows", "1", "--buffer-packets", "9", "--ns3-attribute",
                          "HyStart=false"], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 2 and "--ns3-attribute 'HyStart=false'" in res.stderr, res.stderr


def test_delayed_acks_release_segments_in_pairs_and_without_them_one_at_a_time():
    """One flow through a 10 Mb/s bottleneck is clocked by its ACKs. With delayed ACKs each ACK
    covers two segments and the sender answers with two back to back (12 us apart at 1 Gb/s); with
    every segment ACKed at once, one a time, a bottleneck frame time (1.2 ms) apart. The arrivals
    at the bottleneck show which."""
    back_to_back = {}
    for on in (True, False):
        with SimDumbbell(SimConfig(1, 10.0, [20.0], delayed_ack=on), 1, 40) as net:
            net.run(3.0)
            times = net.arrivals(2.0)
            assert net.sim_seconds == pytest.approx(5.0, abs=1e-6)  # from the helper's clock, not added here
        assert len(times) > 1000 and all(a <= b for a, b in zip(times, times[1:], strict=False))
        assert 3.0 <= times[0] and times[-1] <= 5.0
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        back_to_back[on] = sum(g < 15e-6 for g in gaps) / len(gaps)
    assert back_to_back[True] > 0.3 and back_to_back[False] < 0.1, back_to_back


@pytest.mark.parametrize(
    "cfg,flows,needle",
    [
        (SimConfig(2, 10.0, [20.0, 20.0], cc="vegas"), 2, "--cc vegas"),
        (SimConfig(3, 10.0, [20.0] * 3), 2, "--hosts 3"),
        (SimConfig(1, float("nan"), [20.0]), 1, "--rate-mbps nan"),
        (SimConfig(1, 10.0, [20.0], access_mbps=5.0), 1, "--access-mbps 5"),
        (SimConfig(1, 10.0, [20.0], seed=0), 1, "--seed 0"),
        (SimConfig(1, 10.0, [20.0], attributes=("ns3::TcpCubic::Beta=0.7;x",)), 1, "--ns3-attribute"),
        (SimConfig(1, 10.0, [20.0], attributes=("ns3::A::B=ns3:C",)), 1, "--ns3-attribute"),
    ],
)
def test_config_refused_before_a_process_starts(cfg, flows, needle):
    with pytest.raises(UsageError, match=re.escape(needle)):
        SimDumbbell(cfg, flows, 10)


def test_an_attribute_may_name_a_type():
    SimConfig(1, 10.0, [20.0], attributes=("ns3::TcpL4Protocol::RecoveryType=ns3::TcpClassicRecovery",)).validate(1)


@pytest.mark.slow  # tens of seconds of simulation: make test, not make fast
def test_sim_sweep_command_writes_resumes_and_plots(tmp_path):
    out = tmp_path / "sweep"
    args = [BUFSIZE, "sim", "sweep", "--flows", "10,20", "--seeds", "2", "--rate-mbps", "10", "--rtt-ms", "20",
            "--cc", "reno", "--precision", "0.2", "--workers", "2", "--out", str(out)]  # fmt: skip
    res = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    results = [json.loads((out / f"n{n:04d}-run{s}" / "result.json").read_text()) for n in (10, 20) for s in (1, 2)]
    assert [(r["flows"], r["seed"]) for r in results] == [(10, 1), (10, 2), (20, 1), (20, 2)]
    assert all(r["kind"] == "sim-search" and r["buffer_packets"] >= 1 for r in results)
    assert json.loads((out / "manifest.json").read_text())["machine"]["simulator"] == "ns-3"
    assert (out / "figure.png").exists() and (out / "table.md").exists()
    again = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "4 of 4 points already finished" in again.stderr
    other = subprocess.run([*args[:-2], "--rtt-ms", "30", "--out", str(out)], capture_output=True, text=True)
    assert other.returncode == 2 and "different settings (rtt_ms)" in other.stderr  # resumed only as made
    # More seeds is the same sweep with more runs a point, as on the emulated link: the two new points
    # run, the four finished stay, and the manifest records the change. Asked for as `bufsize sweep`.
    more = [BUFSIZE, "sweep", "--link", "simulated", *args[3:-2], "--seeds", "3", "--out", str(out)]
    grown = subprocess.run(more, capture_output=True, text=True, timeout=600)
    assert grown.returncode == 0 and "4 of 6 points already finished" in grown.stderr, grown.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert [(a["from"], a["to"]) for a in manifest["runs_added"]] == [(2, 3)] and manifest["spec"]["seeds"] == 3
    assert all(json.loads((out / f"n{n:04d}-run3" / "result.json").read_text())["seed"] == 3 for n in (10, 20))
    # The overlay: a sweep plotted with a twin sweep gains the twin's medians and the ratio per N
    # (here the twin against itself, so each ratio is exactly 1).
    plotted = subprocess.run([BUFSIZE, "plot", str(out), "--with-sim", str(out)], capture_output=True, text=True)
    assert plotted.returncode == 0, plotted.stderr
    with open(out / "table.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["flows"] for r in rows] == ["10", "20"]
    assert all(float(r["ratio_to_sim"]) == 1.0 and float(r["sim_median_packets"]) >= 1 for r in rows)
    assert "emulation/twin" in (out / "table.md").read_text()


def test_plot_with_sim_refuses_what_is_not_a_twin_sweep(tmp_path):
    sweep = tmp_path / "emulated"
    (sweep / "n0010-run1").mkdir(parents=True)
    (sweep / "n0010-run1" / "result.json").write_text(json.dumps({"kind": "search", "flows": 10}))
    res = subprocess.run([BUFSIZE, "plot", str(sweep), "--with-sim", str(sweep)], capture_output=True, text=True)
    assert res.returncode == 2 and "not a twin sweep" in res.stderr
    res = subprocess.run([BUFSIZE, "plot", str(sweep), "--with-sim", str(tmp_path / "none")], capture_output=True,
                         text=True)  # fmt: skip
    assert res.returncode == 2 and "--with-sim" in res.stderr


def start_two_point_sweep(out) -> subprocess.Popen:
    args = [BUFSIZE, "sim", "sweep", "--flows", "200,100", "--seeds", "1", "--workers", "2", "--out", str(out)]
    return subprocess.Popen(args, stderr=subprocess.PIPE, text=True)


def both_simulating(sweep: subprocess.Popen) -> list[psutil.Process]:
    """The two points' simulators, once both run (each a grandchild of the sweep, under its worker)."""
    deadline = time.monotonic() + 60
    helpers: list[psutil.Process] = []
    while time.monotonic() < deadline and len(helpers) < 2:
        time.sleep(0.2)
        helpers = [k for k in psutil.Process(sweep.pid).children(recursive=True) if k.name() == HELPER.name]
    assert len(helpers) == 2, "both points should be simulating"
    return helpers


def test_stopped_sim_sweep_leaves_no_process_behind(tmp_path):
    """SIGTERM to `bufsize sim sweep` ends its point processes and their simulators (all ours, by PID),
    and the points it stopped are not counted as finished: a re-run tries them again."""
    out = tmp_path / "sweep"
    with killed_if_left(start_two_point_sweep(out)) as sweep:
        both_simulating(sweep)
        family = psutil.Process(sweep.pid).children(recursive=True)
        sweep.send_signal(signal.SIGTERM)
        sweep.communicate(timeout=60)
        gone, alive = psutil.wait_procs(family, timeout=30)
        assert not alive, alive
        assert not any((out / d / "result.json").exists() for d in ("n0200-run1", "n0100-run1"))


@pytest.mark.extensive  # the long form; the engine's failed and stopped points: tests/test_points.py
def test_a_point_whose_worker_is_killed_runs_again_and_is_merged_once(tmp_path):
    """SIGKILL to the Dask worker running a point, part-way through its search: the engine runs the
    point again on a worker, the sweep finishes both points, reports each once, and the killed
    worker's simulator, reading the end of its input, is gone."""
    out = tmp_path / "sweep"
    with killed_if_left(start_two_point_sweep(out)) as sweep:
        helpers = both_simulating(sweep)
        time.sleep(1)
        victim = helpers[0]
        victim.parent().kill()  # the worker process, ours (a grandchild of the sweep), by PID
        _, err = sweep.communicate(timeout=300)
    assert sweep.returncode == 0, err
    for n in (200, 100):
        result = json.loads((out / f"n{n:04d}-run1" / "result.json").read_text())
        assert result["flows"] == n and result["kind"] == "sim-search" and result["buffer_packets"] >= 1
        assert err.count(f"point N={n} seed 1:") == 1, err  # each point reported (merged) once
        assert not (out / f"n{n:04d}-run1" / "error.json").exists()
    assert "2/2 points finished" in err
    assert psutil.wait_procs([victim], timeout=30)[1] == [], "the killed worker's simulator is still running"


def test_sim_measure_reports_utilization_loss_and_its_cost(tmp_path):
    """At a 40-packet buffer (2.4 x the 16.5-packet pipe) ten Reno flows keep the link full without
    loss worth naming; at 2 packets they lose more and carry less. The result says how much was
    simulated (warm-up, reference, settle, samples: the emulated measure's steps) and what that cost
    in wall time."""
    got = {}
    for b in (40, 2):
        out = tmp_path / f"b{b}"
        args = [BUFSIZE, "sim", "measure", "--flows", "10", "--rate-mbps", "10", "--rtt-ms", "20", "--buffer-packets",
                str(b), "--warmup-s", "3", "--reference-s", "1", "--settle-s", "2", "--duration", "5", "--json",
                "--out", str(out)]  # fmt: skip
        run = subprocess.run(args, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        got[b] = json.loads(run.stdout)
        assert json.loads((out / "result.json").read_text()) == got[b]
    assert got[40]["utilization"] == pytest.approx(1.0, abs=0.01)
    assert got[2]["loss_rate"] > got[40]["loss_rate"] and got[2]["utilization"] < got[40]["utilization"]
    assert got[2]["queue"]["max_packets"] <= 2
    for r in got.values():
        assert r["simulated_seconds"] == pytest.approx(3 + 1 + 2 + 5, abs=1e-6)
        assert 0 < r["wall_seconds"] < 300 and len(r["points"][0]["rates_mbps"]) == 5
    # The senders' loss recovery, under the emulation's names, per segment sent again (ns-3 has no
    # tail-loss probe); a timeout's share grows as the buffer shrinks.
    tight = got[2]["tcp"]
    assert tight["retrans_segs"] > 0 and tight["loss_probes"] == 0 and tight["probes_per_retrans"] == 0
    assert tight["timeouts_per_retrans"] == round(tight["timeouts"] / tight["retrans_segs"], 4)
    assert tight["timeouts_per_retrans"] > (got[40]["tcp"]["timeouts_per_retrans"] or 0)


@pytest.mark.slow  # tens of seconds of simulation: make test, not make fast
def test_util_table_on_the_twin_writes_the_emulated_table_and_resumes(tmp_path):
    """`util-table --link simulated`: the emulated table's rows and columns, each row measured by the
    twin's measure, the table saying where it ran; a re-run keeps the rows it has."""
    out = tmp_path / "util"
    args = [BUFSIZE, "util-table", "--link", "simulated", "--flows", "100", "--multiples", "0.5,3", "--hosts", "20",
            "--rate-mbps", "20", "--rtt-ms", "20..40", "--duration", "10", "--warmup-s", "5", "--reference-s", "5",
            "--json", "--out", str(out)]  # fmt: skip
    res = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    table = json.loads(res.stdout)["table"]
    assert [(int(r["flows"]), float(r["multiple"]), int(float(r["buffer_packets"]))) for r in table] == [
        (100, 0.5, 64), (100, 3.0, 387)]  # fmt: skip
    small, large = (float(r["emulator_pct"]) for r in table)
    assert 50 < small <= large + 0.1 and large <= 100.0, table  # more buffer serves no less on an exact link
    result = json.loads((out / "n0100" / "result.json").read_text())
    assert result["kind"] == "sim-measure" and len(result["points"]) == 2
    assert "on the ns-3 twin" in (out / "table.md").read_text()
    again = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "done earlier, kept" in again.stderr
