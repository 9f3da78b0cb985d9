"""`--start-buffer` on the twin: the flows may start at a small buffer and grow into the calibration
buffer by congestion avoidance, so slow start's overshoot stays small at 1 Gb/s and above."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import BUFSIZE

from bufsize.longlived.measure import REFERENCE_BDPS
from bufsize.longlived.search import SearchOptions, run_search
from bufsize.longlived.sweep import open_sweep
from bufsize.scaffold.cluster import Where
from bufsize.scaffold.runs import Simulated
from bufsize.scaffold.twin import check_start_buffer, start_packets
from bufsize.sim.sweep import SimSweepSpec, twin_runner
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.errors import UsageError
from bufsize.topologies.nssim import SimConfig

SMALL = SimConfig(hosts=10, rate_mbps=10.0, rtt_ms=[20.0] * 10, cc="reno", seed=1)  # a pipe of 16.5 packets


@pytest.mark.parametrize("bad", ["0", "-3", "2.5", "measured", "", "10000001"])
def test_bad_start_buffers_refused(bad):
    with pytest.raises(UsageError, match="--start-buffer"):
        check_start_buffer(bad)


def test_start_packets_never_above_the_calibration_buffer_and_small_is_a_packet_per_flow():
    assert start_packets("calibration", 900, 12, 10) == 900
    assert start_packets("small", 900, 12, 10) == 12
    assert start_packets("small", 900, 8, 800) == 800  # every flow's SYN finds room
    assert start_packets("small", 900, 8, 2000) == 900
    assert start_packets("5", 40, 12, 10) == 5 and start_packets("500", 40, 12, 10) == 40


def test_sweep_made_before_the_option_resumes_and_another_start_is_refused(tmp_path):
    spec = SimSweepSpec([10], 1, 10, 10.0, "20", "reno", 1000.0)
    open_sweep(tmp_path, spec, twin_runner(spec, Where()))
    manifest = tmp_path / "manifest.json"
    old = json.loads(manifest.read_text())
    for key in ("start_buffer", "delayed_ack"):
        del old["spec"][key]
    manifest.write_text(json.dumps(old))
    open_sweep(tmp_path, spec, twin_runner(spec, Where()))  # resumes: missing keys read as the defaults they ran with
    spec.start_buffer = "small"
    with pytest.raises(UsageError, match="start_buffer"):
        open_sweep(tmp_path, spec, twin_runner(spec, Where()))


def test_search_started_small_calibrates_at_two_bdp_and_answers_alike():
    """Started small (the first probe, or one packet per flow if that is more), the flows are still
    calibrated at the 2-BDP buffer (the reference is the link's rate) and the answer lands where the
    default start's does, within the spread of seeds this search has (test_sim_twin: 0.5-2 x of 5.2
    packets)."""
    said: list[str] = []
    opts = SearchOptions(flows=10)
    small = run_search(SMALL, Simulated(None, said.append, "small"), opts)
    usual = run_search(SMALL, Simulated(None, lambda s: None), opts)
    assert usual["start_buffer"] == "calibration"
    assert usual["start_buffer_packets"] == usual["calibration_buffer_packets"]
    assert small["start_buffer"] == "small"
    assert small["start_buffer_packets"] == max(10, small["first_guess"]["packets"])
    assert small["start_buffer_packets"] < small["calibration_buffer_packets"]
    assert any("the flows start at" in line for line in said)
    assert small["valid"], small["flags"]
    assert small["reference_rate_mbps"] >= 0.97 * SMALL.rate_mbps
    assert abs(small["buffer_packets"] - usual["buffer_packets"]) <= max(2, 0.5 * usual["buffer_packets"])


def test_measure_started_small(tmp_path):
    got = {}
    for start in ("calibration", "small", "4"):
        args = [BUFSIZE, "sim", "measure", "--flows", "10", "--rate-mbps", "10", "--rtt-ms", "20", "--buffer-packets",
                "4", "--settle-s", "2", "--duration", "3", "--start-buffer", start, "--json"]  # fmt: skip
        run = subprocess.run(args, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        got[start] = json.loads(run.stdout)
    cal = REFERENCE_BDPS * round(SMALL.bdp_bytes / FRAME_BYTES)  # the emulated measure's warm-up buffer
    assert got["calibration"]["start_buffer_packets"] == cal and got["4"]["start_buffer_packets"] == 4
    assert got["small"]["start_buffer_packets"] == 10  # the 4 measured, raised to one packet per flow
    # Started below the warm-up buffer, the flows warm up there and again at 2 BDP before the reference.
    assert got["4"]["simulated_seconds"] > got["calibration"]["simulated_seconds"]
    assert got["4"]["reference_rate_mbps"] >= 0.97 * SMALL.rate_mbps
    bad = subprocess.run([*args[:-2], "measured", "--json"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--start-buffer measured" in bad.stderr
