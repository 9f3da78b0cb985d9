"""The 2012 buffersizing script's command line, accepted by binary_search.py and resolved without building."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ours, run_states

from buffersizing.compat2012 import translate
from buffersizing.presets import hardware_cc
from topologies.errors import UsageError

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
    before = ours(), run_states()
    res = subprocess.run([sys.executable, SCRIPT, *SWEEP_2012, "--print-config"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    cfg = json.loads(res.stdout)
    assert cfg == {"flows": 800, "hosts": 2, "rate_mbps": 62.5, "rtt_ms": 87.0, "access_mbps": 1000.0,
                   "cc": hardware_cc(), "target": 0.99}  # fmt: skip
    assert (ours(), run_states()) == before
    bad = subprocess.run([sys.executable, SCRIPT, "--bw-net", "0", "--print-config"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--rate-mbps 0" in bad.stderr
