"""The course kit: the starter's gaps, the reference solution, and `bufsize course check` on the
committed runs (pass), on tampered copies (each fails where it was changed), and on a real run."""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import bufsize
from hypothesis import given, settings
from hypothesis import strategies as st

from bufsize.course import check, starter
from bufsize.scaffold.projectfiles import COURSE_RUNS_DIR

RUNS = sorted(COURSE_RUNS_DIR.glob("run-*/answers.json"))
DANGLING = {"a", "an", "the", "of", "over", "to", "and", "or", "with", "each", "link's"}
# The instructor's copy, from the repository: it is not in the package a student installs.
SOLUTION = Path(__file__).resolve().parents[1] / "docs" / "course" / "solution.py"
_spec = importlib.util.spec_from_file_location("course_solution", SOLUTION)
assert _spec is not None and _spec.loader is not None
solution = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(solution)


def committed() -> list[dict]:
    return [json.loads(p.read_text()) for p in RUNS]


def failed(checks: list[check.Check]) -> list[str]:
    return [c.name for c in checks if not c.passed]


def offline_answers(threshold: dict[int, int]) -> dict:
    """answers.json as the solution writes it, from a simulated link: utilization rises with the buffer
    and crosses the target at threshold[N]; each probe's samples are what the utilization says."""
    points = []
    for n, at in threshold.items():
        bdp = math.ceil(starter.RTT_MS / 1e3 * starter.RATE_MBPS * 1e6 / 8 / 1514)
        probes: list[dict] = []

        def probe(b: int, at: int = at, probes: list[dict] = probes) -> float:
            u = starter.TARGET + (0.005 if b >= at else -0.02)
            rates = [round(u * starter.RATE_MBPS, 4)] * 12
            probes.append({"buffer_packets": b, "rates_mbps": rates, "utilization": solution.utilization(rates, 20.0)})
            return probes[-1]["utilization"]

        found = solution.smallest_buffer(probe, 1, bdp, starter.TARGET)
        points.append({"flows": n, "bdp_packets": bdp, "theory_packets": solution.theory_packets(40.0, 20.0, n),
                       "found_packets": found, "probes": probes})  # fmt: skip
    return {
        "config": {"hosts": 8, "rate_mbps": 20.0, "rtt_ms": 40.0, "cc": "reno", "target": 0.99},
        "timing": {"sample_s": 0.5, "probe_s": 6.0, "settle_s": 2.0},
        "points": points,
    }


def test_the_starter_gaps_are_gaps():
    with pytest.raises(NotImplementedError, match="GAP 1"):
        starter.theory_packets(40, 20, 2)
    with pytest.raises(NotImplementedError, match="GAP 2"):
        starter.utilization([20.0], 20.0)
    with pytest.raises(NotImplementedError, match="GAP 3"):
        starter.smallest_buffer(lambda b: 1.0, 1, 10, 0.99)


def test_the_solution_finds_the_threshold_and_its_answers_pass_the_gap_checks():
    answers = offline_answers({2: 60, 8: 30, 32: 15})
    assert [p["found_packets"] for p in answers["points"]] == [60, 30, 15]
    assert answers["points"][0]["theory_packets"] == pytest.approx(100_000 / 1514 / math.sqrt(2))
    checks = check.grade(answers, [])
    assert failed(checks) == ["measured ranges"]  # every gap passes; no committed runs given here


def test_committed_runs_exist_and_each_passes(tmp_path):
    assert len(RUNS) >= 3, f"the expected ranges come from committed runs in {COURSE_RUNS_DIR}"
    runs = committed()
    for path, run in zip(RUNS, runs, strict=True):
        checks = check.grade(run, runs)
        assert not failed(checks), (path, check.report(checks))
        assert any(c.name.startswith("measured, N=") for c in checks)
        # Every message is a whole statement (one once stopped at "over the link's").
        gap2 = [c.detail for c in checks if c.name.startswith("gap 2")]
        assert gap2 and all(d.endswith("over the link's 20 Mb/s") for d in gap2), gap2
        assert all(d and d[-1] not in ",;:'(" and d.split()[-1] not in DANGLING for d in (c.detail for c in checks))


@pytest.mark.parametrize(
    "tamper,fails",
    [
        (lambda a: a["points"][0].update(found_packets=a["points"][0]["found_packets"] + 3), "gap 3, search, N=2"),
        (lambda a: a["points"][1]["probes"][0].update(utilization=a["points"][1]["probes"][0]["utilization"] + 0.01),
         "gap 2, utilization, N=8"),
        (lambda a: a["points"][2].update(theory_packets=a["points"][2]["theory_packets"] * 1.1), "gap 1, theory, N=32"),
        (lambda a: a["config"].update(rate_mbps=25.0), "configuration"),
        (lambda a: a["timing"].update(probe_s=1.0), "configuration"),
    ],
)  # fmt: skip
def test_a_tampered_run_fails_where_it_was_changed(tamper, fails):
    runs = committed()
    answers = copy.deepcopy(runs[0])
    tamper(answers)
    assert fails in failed(check.grade(answers, runs))


def test_a_consistent_answer_outside_the_committed_range_fails_there():
    runs = committed()
    lo, hi, _ = check.expected_ranges(runs)[2]
    outside = [b for b in range(1, 67) if not lo <= b <= hi]
    assert outside, (lo, hi)
    answers = offline_answers({2: outside[-1], 8: 30, 32: 15})
    names = failed(check.grade(answers, runs))
    assert "measured, N=2" in names and not [n for n in names if n.startswith("gap")]


def test_the_command_grades_a_directory_and_says_why_in_one_line(tmp_path):
    good = tmp_path / "good"
    good.mkdir()
    (good / "answers.json").write_text(RUNS[0].read_text())
    res = bufsize("course", "check", str(good))
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip().endswith("checks passed: all")
    bad = copy.deepcopy(committed()[0])
    bad["points"][0]["theory_packets"] = 1.0
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    res = bufsize("course", "check", str(tmp_path / "bad.json"), "--json")
    assert res.returncode == 1
    out = json.loads(res.stdout)
    assert out["passed"] is False and [c["name"] for c in out["checks"] if not c["passed"]] == ["gap 1, theory, N=2"]
    res = bufsize("course", "check", str(tmp_path / "nowhere"))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "not found" in res.stderr
    (tmp_path / "junk.json").write_text("[1, 2")
    res = bufsize("course", "check", str(tmp_path / "junk.json"))
    assert res.returncode == 2 and "not readable" in res.stderr


def test_starter_command_copies_the_starter_once(tmp_path):
    res = bufsize("course", "starter", str(tmp_path / "w"))
    assert res.returncode == 0, res.stderr
    copied = (tmp_path / "w" / "starter.py").read_text()
    assert copied == (COURSE_RUNS_DIR.parents[1] / "buffersizing" / "course" / "starter.py").read_text()
    assert copied.count('raise NotImplementedError("GAP') == 3
    again = bufsize("course", "starter", str(tmp_path / "w"))
    assert again.returncode == 2 and "exists" in again.stderr


@pytest.mark.integration
def test_a_real_short_run_of_the_solution_passes_its_gaps(tmp_path, no_leftovers):
    out = tmp_path / "run"
    res = subprocess.run(
        [sys.executable, str(SOLUTION), "--out", str(out), "--flows", "4", "--probe-s", "1",
         "--settle-s", "0.5"], capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    answers = json.loads((out / "answers.json").read_text())
    (point,) = answers["points"]
    assert point["flows"] == 4 and 1 <= point["found_packets"] <= point["bdp_packets"]
    assert all(len(p["rates_mbps"]) == 2 for p in point["probes"])  # 1 s of 0.5 s samples
    checks = check.grade(answers, committed())
    # The handout's N and timing differ (a short run), so no range applies; every gap is right.
    assert failed(checks) == ["configuration"], check.report(checks)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10**6) | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=20,
)
KEYS = ["flows", "bdp_packets", "theory_packets", "found_packets", "probes", "buffer_packets", "rates_mbps",
        "utilization", "hosts", "rate_mbps", "rtt_ms", "cc", "target", "probe_s", "settle_s", "sample_s"]  # fmt: skip
FIELDS = st.dictionaries(st.sampled_from(KEYS), JSON | st.lists(st.dictionaries(st.sampled_from(KEYS), JSON)))


@settings(max_examples=300, derandomize=True, deadline=None)
@given(config=FIELDS, timing=JSON, points=st.lists(FIELDS | JSON, max_size=4))
def test_any_answers_file_is_graded_or_refused_never_a_crash(config, timing, points):
    checks = check.grade({"config": config, "timing": timing, "points": points}, committed())
    assert checks and all(isinstance(c, check.Check) for c in checks) and checks[0].name == "configuration"
    if checks[0].passed:  # only the handout's link passes (random fields almost never are)
        assert (config.get("rate_mbps"), config.get("hosts")) == (starter.RATE_MBPS, starter.HOSTS)
