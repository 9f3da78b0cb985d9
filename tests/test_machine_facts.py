"""The machine facts a manifest records beside the kernel: which CPUs, which clock, which jiffy. The
development VM came up on three kernel builds in one week while answers moved by day; these let
results be grouped by the machine they ran on. No root needed."""

from __future__ import annotations

import gzip
from pathlib import Path

from bufsize.scaffold.manifest import machine_manifest
from bufsize.topologies.machine import clocksource, cpu_model, cpuidle_driver, kernel_hz, qdisc_support


def test_the_facts_are_the_kernels_own():
    names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
             if line.split(":", 1)[0].strip() == "model name"]  # fmt: skip
    assert cpu_model() == (names[0] if names else None)
    sysfs = Path("/sys/devices/system/clocksource/clocksource0/current_clocksource")
    assert clocksource() == (sysfs.read_text().strip() if sysfs.exists() else None)
    config = Path("/proc/config.gz")
    if config.exists():
        with gzip.open(config, "rt") as f:
            hz = [int(line.split("=")[1]) for line in f if line.startswith("CONFIG_HZ=")]
        assert kernel_hz() == (hz[0] if hz else None)
    assert kernel_hz() in (None, 100, 250, 300, 1000)
    idle = Path("/sys/devices/system/cpu/cpuidle/current_driver")
    assert cpuidle_driver() == (idle.read_text().strip() if idle.exists() else None)


def test_the_manifest_records_them():
    m = machine_manifest("delayline", "reno", "line", False)
    assert (m["cpu_model"], m["clocksource"], m["kernel_hz"]) == (cpu_model(), clocksource(), kernel_hz())
    assert m["cpuidle_driver"] == cpuidle_driver() and m["halt_poll"] is None  # no dumbbell, no poll set
    poll = {"before_run_ns": 0, "during_run_ns": 200_000}
    assert machine_manifest("delayline", "reno", "line", False, poll)["halt_poll"] == poll


def test_the_qdisc_probe_runs_once_per_process():
    # It builds a throwaway namespace each time, and doctor, every run and each delay_backend() ask it;
    # 9708cb1 lost its cache when these facts were added above it (caught in review, not by a test).
    assert hasattr(qdisc_support, "cache_info")
