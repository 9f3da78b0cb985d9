"""Cautions: a result says when the machine was in a state in which answers have moved, without
turning a valid result into a flagged one (no root: the monitor summary is built by hand)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil

from bufsize.longlived.measure import format_measure
from bufsize.monitors.cpu import FOREIGN_LIMIT, ForeignCpu, steal_since_boot, steal_under_wakeups
from bufsize.scaffold.cautions import FINDINGS, MAX_STEAL_SHARE, cautions, describe, idle_report, steal_report

REPO = Path(__file__).resolve().parents[1]


def cpu(steal: float | None) -> dict:
    return {"cpu": {"seconds": 60, "mean_steal_share": steal}} if steal is not None else {}


def test_steal_above_the_limit_is_cautioned_with_its_value():
    (c,) = cautions(cpu(0.071))
    assert c["check"] == "hypervisor_steal" and c["value"] == 0.071 and c["limit"] == MAX_STEAL_SHARE
    text = describe([c])
    assert text.startswith("CAUTION: the hypervisor took 7.1% of the CPUs (over 1%)"), text
    assert FINDINGS in text


def test_steal_at_or_under_the_limit_or_unrecorded_is_not():
    assert cautions(cpu(MAX_STEAL_SHARE)) == []
    assert cautions(cpu(0.0)) == []
    assert cautions(cpu(None)) == [] and cautions({"error": "queue monitor could not start"}) == []
    assert describe([]) == ""


def test_little_idle_cpu_is_a_caution_not_a_flag():
    """The idle share is a proxy: under the limit the result is cautioned beside the answer and stays
    valid; the link's own measurements (pacing, lag, lost time) are the flags."""
    from bufsize.monitors.cpu import MIN_IDLE
    from bufsize.scaffold.cautions import table_note

    (c,) = cautions(cpu(0.0), cpu_idle_min=0.04)
    assert c["check"] == "cpu_idle" and c["value"] == 0.04 and c["limit"] == MIN_IDLE
    assert describe([c]).startswith("CAUTION: the CPUs were at least 4% idle (under 10%)")
    assert cautions(cpu(0.0), cpu_idle_min=MIN_IDLE) == [] and cautions(cpu(0.0), cpu_idle_min=None) == []
    both = cautions(cpu(0.05), cpu_idle_min=0.02)
    assert [x["check"] for x in both] == ["hypervisor_steal", "cpu_idle"]
    assert "cpu_idle, hypervisor_steal" in table_note(checks={x["check"] for x in both})
    assert "hypervisor took over 1%" in table_note() == table_note(checks={"hypervisor_steal"})


def test_other_programs_cpu_past_the_limit_is_a_caution_naming_them():
    top = [{"name": "hog", "pid": 4242, "cpu_s": 23.6}]
    (c,) = cautions({"cpu": {"mean_steal_share": 0.0, "foreign": {"share": 0.252, "top": top}}})
    assert c["check"] == "foreign_cpu" and c["value"] == 0.252 and c["limit"] == FOREIGN_LIMIT
    assert "hog (pid 4242, 23.6 s)" in c["why"]
    assert describe([c]).startswith("CAUTION: other programs took 25.2% of the CPUs (over 5%)")
    for quiet in ({"share": FOREIGN_LIMIT, "top": []}, {"share": None, "top": [], "error": "denied"}):
        assert cautions({"cpu": {"foreign": quiet}}) == []


# Busy until argv[2] seconds have passed, its PID written to argv[1] first.
BUSY = (
    "import os, sys, time\n"
    "open(sys.argv[1], 'w').write(str(os.getpid()))\n"
    "end = time.monotonic() + float(sys.argv[2])\n"
    "while time.monotonic() < end:\n"
    "    pass\n"
)


def test_foreign_cpu_counts_a_program_outside_the_run_and_not_the_runs_own(tmp_path):
    """A busy process that is not the run's (started through setsid -f, so its parent is gone) is
    counted, by name and PID; a busy child of the run's process is not. Both end by themselves."""
    own = subprocess.Popen([sys.executable, "-c", BUSY, str(tmp_path / "own.pid"), "2.5"])
    subprocess.run(["setsid", "-f", sys.executable, "-c", BUSY, str(tmp_path / "other.pid"), "2.5"], check=True)
    try:
        deadline = time.monotonic() + 10
        written = tmp_path / "other.pid"
        while not (written.exists() and written.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        other = int(written.read_text())
        watch = ForeignCpu()
        time.sleep(1.5)
        got = watch.result()
    finally:
        own.wait(timeout=30)
    seen = {t["pid"]: t for t in got["top"]}
    assert other in seen and seen[other]["cpu_s"] >= 0.3, got  # busy for 1.5 s, even when it shares a core
    assert own.pid not in seen, got
    assert got["share"] >= seen[other]["cpu_s"] / (1.6 * (psutil.cpu_count() or 1)), got
    psutil.wait_procs([p for p in psutil.process_iter() if p.pid == other], timeout=10)


def test_the_findings_anchor_exists():
    page, anchor = FINDINGS.split("#")
    heads = [line.lstrip("#").strip() for line in (REPO / page).read_text().splitlines() if line.startswith("## ")]
    slugs = {"".join(ch for ch in h.lower() if ch.isalnum() or ch in " -").replace(" ", "-") for h in heads}
    assert anchor in slugs, anchor


def measure_result(cautioned: list[dict]) -> dict:
    return {
        "utilization": 0.995, "nominal_rate_mbps": 62.5, "loss_rate": 0.01, "valid": True, "flags": {"x": True},
        "queue": {"mean_packets": 3, "p99_packets": 9, "max_packets": 10}, "cautions": cautioned,
    }  # fmt: skip


def test_measure_line_carries_the_caution_and_stays_valid():
    r = measure_result(cautions(cpu(0.09)))
    text = format_measure(r, None)
    assert "FLAGGED" not in text and "\nCAUTION: the hypervisor took 9.0% of the CPUs" in text, text
    assert "CAUTION" not in format_measure(measure_result([]), None)
    old = measure_result([])
    del old["cautions"]  # a result written before cautions existed still formats
    assert format_measure(old, None).startswith("utilization 99.50%")


def test_doctor_names_the_steal_it_saw_and_cautions_past_the_limit():
    quiet = steal_report({"under_load": 0.004, "load_s": 2.0, "since_boot": 0.009})
    assert quiet == (
        "hypervisor steal:     0.4% of the CPUs with every core waking about 2000 times a second for 2 s, "
        "0.9% of busy time since boot"
    )
    for loaded, since in ((0.031, 0.0), (0.0, 0.015)):  # either view past the limit
        text = steal_report({"under_load": loaded, "load_s": 2.0, "since_boot": since})
        first, caution = text.splitlines()
        assert caution.startswith("CAUTION: over 1%: answers have moved") and FINDINGS in caution, text


def test_doctor_says_how_idle_vcpus_wait_and_what_a_run_sets():
    assert idle_report({"driver": "haltpoll", "halt_poll_ns": 0}) == (
        "idle vCPUs:           haltpoll, polling up to 0 us before they halt; runs raise it to 200 us while they "
        "last (a vCPU that halts waits for the hypervisor at each wake-up)"
    )
    assert idle_report({"driver": "acpi_idle", "halt_poll_ns": None}).endswith("acpi_idle (no halt poll to set)")
    assert "no cpuidle driver" in idle_report({"driver": None, "halt_poll_ns": None})


def test_the_steal_probe_loads_every_core_and_leaves_no_process():
    before = psutil.Process().children(recursive=True)
    share = steal_under_wakeups(0.5)
    assert share.busy > 0.3, share  # our loads ran on the cores (0.3 ms of every 0.5, and their wake-ups)
    assert 0.0 <= share.steal <= share.busy
    assert psutil.Process().children(recursive=True) == before
    assert 0.0 <= steal_since_boot() < 1.0
