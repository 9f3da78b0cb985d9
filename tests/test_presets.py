"""What the named sweeps fix, checked without building anything."""

from __future__ import annotations

import pytest
from conftest import spec_of

from bufsize.longlived.presets import PRESETS, format_preset_methods, preset, preset_methods
from bufsize.topologies.config import line_capacity_warning


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_pins_the_line_within_its_measured_envelope_on_two_cpus(name):
    """A preset answers with the method its committed results used on every machine: the line, pinned
    in the spec (HTB answered 2 packets where the line answered 7-8 at N=200 and 800,
    results/hosts/2026-11-25/), and within the host count the line was measured to keep up with."""
    spec = spec_of("--preset", name)
    assert spec.shaper == "line"
    for n in spec.flows:
        hosts = min(n, spec.max_hosts)
        assert line_capacity_warning(spec.shaper, hosts, cpus=2) is None, (name, n, hosts)
    # N up to 100 keep one flow a host, as before.
    assert all(min(n, spec.max_hosts) == n for n in spec.flows if n <= 100)


def test_doctor_names_each_presets_method_and_refuses_rather_than_falls_back():
    netem = {"netem": True}
    methods = preset_methods(netem, delayline_built=True, cpus=2)
    for name in PRESETS:
        m = methods[name]
        assert m["runs"] and m["shaper"] == "line" and m["delay_backend"] == "delayline", m
        assert "netem" in m["why"]  # says the delay line carries the delay although netem exists
    one_cpu = preset_methods(netem, delayline_built=True, cpus=1)
    assert one_cpu["quick"]["runs"] and "1 CPU" in one_cpu["quick"]["warning"]  # pinned: run, but warned
    unbuilt = preset_methods(netem, delayline_built=False, cpus=2)
    assert not unbuilt["full"]["runs"] and "not built" in unbuilt["full"]["why"]
    text = format_preset_methods(methods | {"quick": one_cpu["quick"], "theory": unbuilt["theory"]})
    assert "preset theory:  cannot run here" in text and "preset full:    shaper line" in text
    assert "  warning: 1 CPU" in text


def test_hosts_given_with_a_preset_override_it():
    assert spec_of("--preset", "full", "--hosts", "400").max_hosts == 400
    assert spec_of("--preset", "full").max_hosts == preset("full")["max_hosts"]


def test_fig11_is_seed_000s_experiment_with_its_target_unless_one_is_given():
    """155 Mb/s, Reno, RTTs spread about a mean of 80 ms, N = 50..500, 98 % unless --target says."""
    spec = spec_of("--preset", "fig11")
    assert (spec.rate_mbps, spec.cc, spec.flows[0], spec.flows[-1]) == (155.0, "reno", 50, 500)
    lo, hi = (float(x) for x in spec.rtt_ms.split(".."))
    assert (lo + hi) / 2 == 80 and hi > lo
    assert spec.search["target"] == 0.98
    assert spec_of("--preset", "fig11", "--target", "0.999").search["target"] == 0.999
    # Other sweeps keep the search's 99 %.
    assert spec_of("--preset", "full").search["target"] == 0.99
    assert spec_of("--flows", "2,10").search["target"] == 0.99


def test_bbr_preset_is_the_full_sweep_with_bbr():
    """Issue 33 item 2: the full preset's link, N, runs and rule, only the congestion control differs."""
    bbr, full = spec_of("--preset", "bbr"), spec_of("--preset", "full")
    assert bbr.cc == "bbr" and full.cc != "bbr"
    same = ("flows", "runs", "rate_mbps", "rtt_ms", "max_hosts", "shaper", "search")
    assert {k: getattr(bbr, k) for k in same} == {k: getattr(full, k) for k in same}
    assert bbr.runs >= 3 and bbr.flows[0] == 2 and bbr.flows[-1] == 800
