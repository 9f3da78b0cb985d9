"""Cautions: a result says when the machine was in a state in which answers have moved, without
turning a valid result into a flagged one (no root: the monitor summary is built by hand)."""

from __future__ import annotations

from pathlib import Path

from bufsize.cautions import FINDINGS, MAX_STEAL_SHARE, cautions, describe
from bufsize.longlived.measure import format_measure

REPO = Path(__file__).resolve().parents[1]


def cpu(steal: float | None) -> dict:
    return {"cpu": {"seconds": 60, "mean_steal_share": steal}} if steal is not None else {}


def test_steal_above_the_limit_is_cautioned_with_its_value():
    (c,) = cautions(cpu(0.071))
    assert c["check"] == "hypervisor_steal" and c["value"] == 0.071 and c["limit"] == MAX_STEAL_SHARE
    text = describe([c])
    assert text.startswith("CAUTION: the hypervisor took 7.1% of the CPUs (over 2%)"), text
    assert FINDINGS in text


def test_steal_at_or_under_the_limit_or_unrecorded_is_not():
    assert cautions(cpu(MAX_STEAL_SHARE)) == []
    assert cautions(cpu(0.0)) == []
    assert cautions(cpu(None)) == [] and cautions({"error": "queue monitor could not start"}) == []
    assert describe([]) == ""


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
