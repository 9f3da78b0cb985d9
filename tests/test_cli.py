"""The command line: bad input is refused in one line with status 2 and creates nothing; doctor reports."""

from __future__ import annotations

import json
import os

import pytest
from conftest import BUFSIZE, bufsize, isolated

from bufsize.topologies.errors import UsageError


@pytest.mark.parallel
@pytest.mark.parametrize(
    "args,needle",
    [
        (["--rate-mbps", "0"], "--rate-mbps 0"),
        (["--rate-mbps", "-3"], "--rate-mbps -3"),
        (["--rate-mbps", "abc"], "abc"),
        (["--rtt-ms", "-1"], "--rtt-ms -1"),
        (["--rtt-ms", "300..20"], "--rtt-ms 300..20"),
        (["--hosts", "401"], "--hosts 401"),
        (["--hosts", "0"], "--hosts 0"),
        (["--buffer-bytes", "1000"], "--buffer-bytes 1000"),
        (["--buffer-packets", "0.5"], "--buffer-packets 0.5"),
        (["--cc", "nosuchcc"], "--cc nosuchcc"),
        (["--shaper", "red"], "red"),
        (["--duration", "0"], "--duration 0"),
    ],
)
def test_bad_input_is_one_line_status_2_and_creates_nothing(root, args, needle, tmp_path):
    res = isolated([BUFSIZE, "verify", *args], tmp_path, 30)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], res.stderr
    assert res.left == {"netns": [], "ledger": []}


def test_doctor_json_reports_backend_consistent_with_qdiscs(root):
    res = bufsize("doctor", "--json", timeout=60)
    assert res.returncode == 0, res.stdout
    caps = json.loads(res.stdout)
    for key in ("root", "kernel", "qdiscs", "openvswitch_module", "tracepoints", "congestion_controls", "iperf"):
        assert key in caps
    assert caps["qdiscs"]["htb"] and caps["qdiscs"]["tbf"] and caps["qdiscs"]["bfifo"]
    assert caps["delay_backend"] == ("netem" if caps["qdiscs"]["netem"] else "delayline")
    assert "reno" in caps["congestion_controls"]
    steal = caps["steal"]  # sampled with every core busy, and since boot
    assert steal["load_s"] == 2.0 and 0 <= steal["under_load"] < 1 and 0 <= steal["since_boot"] < 1, steal


def verify_json(*args: str) -> tuple[dict, int]:
    res = bufsize("verify", "--hosts", "2", "--rate-mbps", "62.5", *args, "--json")
    return json.loads(res.stdout), res.returncode


@pytest.mark.integration
def test_verify_reports_rtt_rate_and_the_machine_around_them(no_leftovers):
    """What verify measured, how it judged it, and the cautions every run carries. Whether the RTT and
    the rate are right is a claim (tests/claims: host-rtts, rate), judged where the machine is quiet."""
    s, code = verify_json("--rtt-ms", "87", "--duration", "2")
    assert s["delay_backend"] in ("netem", "delayline")
    assert s["configured_rtt_ms"] == 87.0 and s["configured_rate_mbps"] == 62.5
    assert [p["host"] for p in s["per_host"]] == [1, 2] and all(p["loss_pct"] == 0 for p in s["per_host"])
    assert s["measured_rtt_ms"] >= 87.0, s  # no frame arrives before its delay
    assert s["rate_test_flows"] >= 8 and s["rate_test_warmup_seconds"] >= 0
    assert 0 < s["measured_rate_mbps"] <= 62.5 * 1.02, s  # the shaper never lets more through
    assert len(s["rate_per_second_mbps"]) >= 1 and s["delayline_drops"] == 0
    assert s["ok"] == (s["rtt_ok"] and s["rate_ok"]) and code == (0 if s["ok"] else 1)
    assert 0 <= s["cpu"]["mean_steal_share"] <= 1 and s["cpu"]["foreign"]["share"] is not None, s["cpu"]
    assert isinstance(s["cautions"], list) and all(c["value"] > c["limit"] for c in s["cautions"]), s["cautions"]


@pytest.mark.parallel
@pytest.mark.parametrize(
    "args,needle",
    [
        (["search", "--flows", "0"], "--flows 0"),
        (["search", "--flows", "801"], "--flows 801"),
        (["search", "--target", "1.5"], "--target 1.5"),
        (["search", "--samples", "0"], "--samples 0"),
        (["search", "--settle-s", "-1"], "--settle-s -1"),
        (["search", "--buffer-packets", "10"], "chooses the buffer"),
        (["sweep", "--out", "/tmp/bsz-never", "--flows", "2,x"], "--flows 2,x"),
        (["sweep", "--out", "/tmp/bsz-never", "--flows", "2,2"], "listed twice"),
        (["sweep", "--out", "/tmp/bsz-never", "--flows", "10", "--runs", "0"], "--runs 0"),
        (["sweep", "--out", "/tmp/bsz-never", "--preset", "huge"], "huge"),
        (["sweep", "--out", "/tmp/bsz-never"], "--preset"),
        (["plot", "/nonexistent-dir"], "not a directory"),
        (["measure", "--flows", "2"], "give the buffer"),
        (["measure", "--flows", "0", "--buffer-packets", "10"], "--flows 0"),
        (["measure", "--buffer-packets", "10", "--duration", "-5"], "--duration -5"),
        (["measure", "--buffer-packets", "10", "--duration", "2", "--sample-s", "5"], "--sample-s 5"),
        (["util-table", "--out", "/tmp/bsz-never", "--flows", "100,0"], "--flows 0"),
        (["util-table", "--out", "/tmp/bsz-never", "--multiples", "1,-2"], "--multiples 1,-2"),
        (["util-table", "--out", "/tmp/bsz-never", "--multiples", "a"], "--multiples a"),
        (["model", "--flows", "0"], "--flows"),
    ],
)
def test_search_sweep_plot_bad_input(root, args, needle, tmp_path):
    res = isolated([BUFSIZE, *args], tmp_path, 30)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], res.stderr
    assert res.left == {"netns": [], "ledger": []}
    assert not os.path.exists("/tmp/bsz-never")


def test_link_routes_an_experiment_to_the_twin_or_keeps_it_emulated():
    from bufsize.cli import route_link

    assert route_link(["search", "--flows", "4", "--link", "simulated"]) == ["sim", "search", "--flows", "4"]
    assert route_link(["measure", "--link=simulated", "--buffer-packets", "4"]) == [
        "sim", "measure", "--buffer-packets", "4"
    ]  # fmt: skip
    assert route_link(["sweep", "--link", "emulated", "--flows", "2"]) == ["sweep", "--flows", "2"]
    assert route_link(["search", "--link", "nan"]) == ["search", "--link", "nan"]  # the parser refuses it
    assert route_link(["plot", "--link", "simulated"]) == ["plot", "--link", "simulated"]  # no link there
    assert route_link(["search", "--out", "x", "--", "--link", "simulated"]) == [
        "search", "--out", "x", "--", "--link", "simulated"
    ]  # fmt: skip
    with pytest.raises(UsageError, match="once"):
        route_link(["search", "--link", "simulated", "--link", "emulated"])


def test_an_option_of_the_other_link_is_refused_by_name_in_one_line():
    for argv, name in (
        (["search", "--link", "simulated", "--flows", "4", "--shaper", "htb"], "--shaper"),
        (["measure", "--link", "simulated", "--buffer-packets", "4", "--delay-backend", "netem"], "--delay-backend"),
        (["search", "--flows", "4", "--seed", "2"], "--seed"),
    ):
        r = bufsize(*argv, timeout=60)
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and name in lines[0] and "Traceback" not in r.stderr, r.stderr
