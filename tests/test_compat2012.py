"""The 2012 buffersizing script's command line, accepted by binary_search.py and resolved without building."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ledgered_by

from bufsize.cli.compat2012 import translate
from bufsize.longlived.presets import hardware_cc
from bufsize.topologies.errors import UsageError

SCRIPT = str(Path(__file__).resolve().parents[1] / "binary_search.py")
SWEEP_2012 = ["--bw-net", "62.5", "--delay", "43.5", "-n", "3", "--nflows", "400", "--maxq", "100", "--cong", "bic"]


def test_translation_of_each_option():
    args, notes = translate([*SWEEP_2012, "--bw-host", "100", "--dir", "out", "--target", "0.98", "--iperf", "x"])
    pairs = dict(zip(args[::2], args[1::2], strict=True))
    assert pairs == {
        "--hosts": "2",  # -n counts the receiver
        "--flows": "800",  # --nflows is per sender
        "--rate-mbps": "62.5",
        "--access-mbps": "100",
        "--rtt-ms": "87",  # two one-way delays of 43.5 ms
        "--max-buffer-packets": "100",
        "--cc": hardware_cc(),  # bic where the kernel has it, else cubic
        "--out": "out",
        "--target": "0.98",  # today's option, passed through
    }
    assert any("--iperf" in n for n in notes)
    with pytest.raises(UsageError, match="-n"):
        translate(["--nflows", "3"])
    with pytest.raises(UsageError, match="-n 1"):
        translate(["-n", "1"])


def test_print_config_resolves_the_2012_sweep_line_and_builds_nothing():
    proc = subprocess.Popen([sys.executable, SCRIPT, *SWEEP_2012, "--print-config"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    out, err = proc.communicate(timeout=60)
    res = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    assert res.returncode == 0, res.stderr
    cfg = json.loads(res.stdout)
    assert cfg | {"bdp_packets": None} == {
        "preset": "full",  # the published figures' method, with the 2012 line's values over it
        "flows": 800, "hosts": 2, "rate_mbps": 62.5, "rtt_ms": 87.0, "access_mbps": 1000.0, "cc": hardware_cc(),
        "target": 0.99, "max_buffer_packets": 100,  # --maxq, the top of the 2012 search
        "shaper": "line", "delay_backend": "auto", "burst_bytes": None, "pacer": cfg["pacer"], "bdp_packets": None,
        "loss_recovery": "linux", "delayed_ack": True, "sender_pacing": False,
        "relative_to": "reference", "samples": 3, "settle_s": None, "sample_s": None, "max_sample_s": 30.0,
        "sample_length": "measured",
        "resolution": 0.05, "max_samples": 0, "alpha": 0.05, "precision": 0.1, "level": 0.9, "first_guess": True,
        "tool": "iperf", "fidelity_s": 2.0, "max_sample_steal": 0.005,
    }  # fmt: skip
    assert cfg["bdp_packets"] == pytest.approx(62.5e6 / 8 * 0.087 / 1514, abs=0.1)
    assert ledgered_by(proc.pid) == []
    bad = subprocess.run([sys.executable, SCRIPT, "--bw-net", "0", "--print-config"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--rate-mbps 0" in bad.stderr


def test_help_lists_the_2012_options_with_what_each_becomes():
    res = subprocess.run([sys.executable, SCRIPT, "--help"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "--flows" in res.stdout  # today's search options
    section = res.stdout[res.stdout.index("2012") :]
    for flag, today in [
        ("--bw-net", "--rate-mbps"),
        ("--delay", "--rtt-ms"),
        ("--maxq", "--max-buffer-packets"),
        ("--nflows", "--flows"),
        ("--cong", "--cc"),
        ("--dir", "--out"),
        ("--iperf", "ignored"),
    ]:
        line = next(ln for ln in section.splitlines() if ln.strip().startswith(flag))
        assert today in line, line  # fmt: skip
