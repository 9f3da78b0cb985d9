"""What the named sweeps fix, checked without building anything."""

from __future__ import annotations

import pytest
from conftest import spec_of

from buffersizing.presets import PRESETS, preset
from topologies.config import resolve_shaper


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_point_runs_on_the_line_on_two_cpus(name):
    """HTB (what auto gives more than 100 hosts on 2 CPUs) answered 2 packets where the line answered
    7-8 at N=200 and 800 (results/hosts/2026-11-25/): a preset's points must all fit the line."""
    spec = spec_of("--preset", name)
    for n in spec.flows:
        hosts = min(n, spec.max_hosts)
        assert resolve_shaper("auto", "delayline", hosts, cpus=2) == "line", (name, n, hosts)
    # N up to 100 keep one flow a host, as before.
    assert all(min(n, spec.max_hosts) == n for n in spec.flows if n <= 100)


def test_hosts_given_with_a_preset_override_it():
    assert spec_of("--preset", "full", "--hosts", "400").max_hosts == 400
    assert spec_of("--preset", "full").max_hosts == preset("full")["max_hosts"]
