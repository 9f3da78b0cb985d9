"""The method a command resolves: `search` without a preset runs the published figures' method, and
`--print-config` on every command that runs an experiment prints what it resolved and builds nothing."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import BUFSIZE, ledgered_by

from bufsize.longlived.presets import FULL_PRECISION, PRESET_MAX_HOSTS, hardware_cc, preset

# Every command that runs an experiment, with the least it needs to resolve one.
EXPERIMENTS = [
    ["search", "--flows", "10"],
    ["search", "--flows", "10", "--link", "simulated"],
    ["measure", "--flows", "4", "--buffer-packets", "20"],
    ["measure", "--flows", "4", "--buffer-packets", "20", "--link", "simulated"],
    ["sweep", "--preset", "quick"],
    ["sweep", "--flows", "2,10", "--link", "simulated"],
    ["util-table", "--out", "never-made", "--flows", "100"],
    ["util-table", "--out", "never-made", "--flows", "100", "--link", "simulated"],
    ["quick"],
    ["shortflows", "--users", "5", "--duration", "10", "--buffer-packets", "20"],
    ["shortexp", "loss", "--out", "never-made"],
    ["shortexp", "loss", "--out", "never-made", "--link", "simulated"],
    ["sim", "shortexp", "mix", "--out", "never-made"],
]


def resolve(*argv: str) -> dict:
    """What --print-config prints; the command must have built nothing (no ledger of its own)."""
    proc = subprocess.Popen([BUFSIZE, *argv, "--print-config"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert ledgered_by(proc.pid) == []
    return json.loads(out)


@pytest.mark.parametrize("argv", EXPERIMENTS, ids=lambda a: " ".join(a[:2]))
def test_print_config_prints_what_would_run_and_builds_nothing(argv, tmp_path):
    resolved = resolve(*argv)
    assert isinstance(resolved, dict) and resolved
    assert not Path("never-made").exists()


def test_search_without_a_preset_is_the_published_figures_method():
    full = preset("full")
    cfg = resolve("search", "--flows", "10")
    assert cfg["preset"] == "full"
    assert (cfg["cc"], cfg["hosts"], cfg["rate_mbps"], cfg["rtt_ms"]) == (hardware_cc(), 10, 62.5, 87.0)
    assert (cfg["precision"], cfg["samples"], cfg["sample_length"]) == (FULL_PRECISION, 3, "measured")
    assert cfg["shaper"] == full["shaper"] == "line"
    # min(N, 400) hosts, as the figures' sweeps ran; flags override any part of the method.
    assert resolve("search", "--flows", "800")["hosts"] == PRESET_MAX_HOSTS
    mine = resolve("search", "--flows", "10", "--cc", "reno", "--hosts", "2", "--precision", "0")
    assert (mine["cc"], mine["hosts"], mine["precision"], mine["samples"]) == ("reno", 2, 0.0, 3)
    # A named preset is that method: theory is reno; fig11 is 155 Mb/s at 98 %.
    assert resolve("search", "--flows", "10", "--preset", "theory")["cc"] == "reno"
    fig11 = resolve("search", "--flows", "100", "--preset", "fig11")
    assert (fig11["rate_mbps"], fig11["target"]) == (155.0, 0.98)


def test_a_sweep_point_and_a_search_resolve_the_same_method():
    point = resolve("sweep", "--flows", "50")["spec"]
    search = resolve("search", "--flows", "50")
    assert point["preset"] == search["preset"] == "full" and point["runs"] == 1
    assert {k: search[k] for k in point["search"]} == point["search"]
    assert (point["cc"], point["rate_mbps"], point["shaper"]) == (search["cc"], search["rate_mbps"], search["shaper"])


def test_the_twin_search_resolves_the_same_rule_and_says_when_it_lacks_the_cc():
    twin = resolve("search", "--flows", "10", "--link", "simulated")
    emulated = resolve("search", "--flows", "10")
    rule = ("target", "samples", "precision", "resolution", "sample_length", "max_samples")
    assert {k: twin["search"][k] for k in rule} == {k: emulated[k] for k in rule}
    assert twin["config"]["cc"] == ("cubic" if hardware_cc() == "bic" else hardware_cc())
    res = subprocess.run([BUFSIZE, "sim", "search", "--flows", "10", "--preset", "theory", "--print-config"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert json.loads(res.stdout)["config"]["cc"] == "reno"


def test_a_sweep_needs_out_unless_it_only_prints_its_config():
    res = subprocess.run([BUFSIZE, "sweep", "--flows", "10"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--out" in res.stderr
