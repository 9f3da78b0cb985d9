"""Fixed-buffer measurement (bufsize measure) on real traffic, and the util-table's arithmetic."""

from __future__ import annotations

import json
import math
import os

import pytest
from conftest import bufsize

from bufsize.longlived import utiltable
from bufsize.theory.model import utilization_lower_bound
from bufsize.topologies.config import resolve_shaper


def test_util_table_buffers_are_the_published_packet_counts():
    pub = utiltable.published()
    assert len(pub) == 16
    for (n, mult), row in pub.items():
        assert utiltable.buffer_packets(n, mult) == row["buffer_packets"], (n, mult)


def test_util_table_rows_pair_measurements_with_published_columns(tmp_path):
    d = utiltable.point_dir(tmp_path, 200)
    d.mkdir()
    point = {
        "buffer_packets": 91.0,
        "utilization": 0.9931,
        "utilization_samples": {"min": 0.97},
        "loss_rate": 0.0123,
        "queue": {"mean_packets": 30.5, "empty_fraction": 0.02},
    }
    res = {"flows": 200, "points": [point], "reference_rate_mbps": 154.9, "nominal_rate_mbps": 155.0, "valid": True}
    (d / "result.json").write_text(json.dumps(res))
    (row,) = utiltable.rows(tmp_path)
    assert row["multiple"] == 1.0 and row["router_pct"] == 99.7 and row["published_ns2_pct"] == 99.2
    assert row["emulator_pct"] == 99.31 and row["loss_pct"] == 1.23
    assert row["model_bound_pct"] == round(100 * utilization_lower_bound(91, 1291, 200), 2)
    md, csv_path = utiltable.write_table([row], tmp_path)
    assert "| 200 | 1.0 | 91.0 |" in md.read_text() and csv_path.read_text().count("\n") == 2


@pytest.mark.integration
def test_measure_reports_utilization_loss_and_queue_within_the_buffer(no_leftovers, tmp_path):
    out = tmp_path / "m"
    res = bufsize(
        "measure", "--hosts", "2", "--flows", "4", "--rate-mbps", "20", "--rtt-ms", "20", "--cc", "cubic",
        "--buffer-packets", "20", "--duration", "4", "--reference-s", "2", "--warmup-s", "2", "--settle-s", "1",
        "--fidelity-s", "1",
        "--out", str(out), "--json", timeout=180,
    )  # fmt: skip
    assert res.returncode in (0, 3), res.stderr
    r = json.loads(res.stdout)
    assert r["buffer_packets"] == 20 and r["flows"] == 4
    assert r["options"]["warmup_s"] == 2  # given, so not the 15 s floor, and the result says so
    assert 0 < r["utilization"] <= 1.01, r["utilization"]  # how high: the claims (links, sawtooth-one-flow)
    (p,) = r["points"]
    assert p["packets_sent"] > 0 and p["bottleneck_drops"] > 0  # 20 packets overflow within seconds
    assert math.isclose(
        r["loss_rate"], p["bottleneck_drops"] / (p["packets_sent"] + p["bottleneck_drops"]), abs_tol=1e-5
    )
    assert r["queue"]["max_packets"] <= 20 and r["queue"]["samples"] > 0
    assert r["drops"]["outside_bottleneck_total"] == 0
    assert 0 < r["reference_rate_mbps"] / 20 <= 1.01
    assert r["monitors"]["cwnd"]["flows_seen"] == 4 and p["cwnd_sum"]["samples"] > 0
    for name in ("result.json", "queue.csv", "rate.csv", "cwnd_sum.csv", "cwnd_flows.csv", "cpu.csv", "queue.png"):
        assert (out / name).exists(), name
    assert_manifest(out, r, resolve_shaper("auto", "delayline"))
    # The plots can be redrawn from the data alone.
    (out / "queue.png").unlink()
    again = bufsize("plot", str(out))
    assert again.returncode == 0 and (out / "queue.png").exists(), again.stderr


def assert_manifest(out, r: dict, shaper: str) -> None:
    """A lone run's result says which machine, kernel, commit, backend and shaper made it."""
    m = json.loads((out / "result.json").read_text())["manifest"]
    assert m == r["manifest"] and m["kernel"] == os.uname().release and m["cpus"] == os.cpu_count()
    assert m["delay_backend"] == r["delay_backend"] and m["shaper"] == shaper and m["congestion_control"] == r["cc"]
    assert len(m["project_commit"].split()[0]) == 40  # a git hash, dirty or not


@pytest.mark.integration
def test_measure_with_the_line_shaper(no_leftovers, tmp_path):
    """The whole experiment on the delay line's own queue: monitors read it like the bfifo."""
    out = tmp_path / "line"
    res = bufsize(
        "measure", "--hosts", "2", "--flows", "4", "--rate-mbps", "20", "--rtt-ms", "20", "--cc", "cubic",
        "--buffer-packets", "10", "--duration", "4", "--reference-s", "2", "--warmup-s", "2", "--settle-s", "1",
        "--fidelity-s", "1",
        "--shaper", "line", "--delay-backend", "delayline", "--out", str(out), "--json", timeout=180,
    )  # fmt: skip
    assert res.returncode in (0, 3), res.stderr
    r = json.loads(res.stdout)
    (p,) = r["points"]
    assert r["queue"]["max_packets"] <= 10 and r["queue"]["samples"] > 0
    assert p["bottleneck_drops"] > 0 and r["drops"]["bottleneck_buffer"] > 0
    assert r["drops"]["outside_bottleneck_total"] == 0, r["drops"]
    assert 0 < r["utilization"] <= 1.01 and 0 < r["reference_rate_mbps"] / 20 <= 1.01
    assert r["fidelity"]["available"] and r["fidelity"]["departures"] > 0, r["fidelity"]
    assert r["fidelity"]["overruns"] == 0, r["fidelity"]  # the ring buffer sized to the trace held it all
    # The delay line's timekeeping over the seconds sampled.
    kept = p["delay_line"]
    assert kept["seconds"] > 0, kept
    assert kept["forward_late_mean_us"] >= 0 and kept["reverse_late_mean_us"] >= 0 and kept["line_lost_ms"] >= 0
    assert_manifest(out, r, "line")
