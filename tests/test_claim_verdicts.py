"""The claims stage's rules (tests/claims): how a claim's verdict follows from the instrument's account of
its runs, that a run disturbed from outside is measured once more and never a third time, and that
every claim has a planted fault that must break it. No run is made here; the claims' runs are made by
`make claims` (the README's test command runs it)."""

from __future__ import annotations

import pytest
from claims import faults
from claims.scenarios import FAULTS_BREAK, SCENARIOS
from claims.verdict import BROKEN, HELD, INCONCLUSIVE, Check, Claim, Run, judge, measure_twice, summary

STEAL = {"check": "hypervisor_steal", "value": 0.061, "limit": 0.01, "why": "..."}
FOREIGN = {"check": "foreign_cpu", "value": 0.055, "limit": 0.05, "why": "..."}
IDLE = {"check": "cpu_idle", "value": 0.05, "limit": 0.1, "why": "..."}


def run(name: str = "r", valid: bool = True, cautions: tuple = (), figure: float = 1.0, **kw) -> Run:
    flags = {"pacing_fidelity_ok": valid}
    data = {"valid": valid, "flags": flags, "cautions": list(cautions), "figure": figure}
    data["monitors"] = {"cpu": {"foreign": {"top": [{"name": "process_api", "pid": 1, "cpu_s": 4.4}]}}}
    return Run(name, data, **kw)


AT_LEAST_ONE = Claim(
    "c", "the figure is at least one", ("r",), lambda d: Check(d["r"]["figure"] >= 1, f"{d['r']['figure']}")
)


def test_a_valid_quiet_run_that_holds_is_held_and_one_that_misses_is_broken():
    assert judge(AT_LEAST_ONE, {"r": [run()]}).verdict == HELD
    missed = judge(AT_LEAST_ONE, {"r": [run(figure=0.5)]})
    assert missed.verdict == BROKEN and missed.line() == "claim c: broken (missed) 0.5"


def test_a_flagged_run_with_no_cause_from_outside_is_broken_even_if_the_figure_holds():
    v = judge(AT_LEAST_ONE, {"r": [run(valid=False)]})
    assert v.verdict == BROKEN and "flagged pacing_fidelity_ok" in v.why and "no cause from outside" in v.why


def test_the_idle_caution_is_the_runs_own_load_not_a_cause_from_outside():
    assert judge(AT_LEAST_ONE, {"r": [run(cautions=(IDLE,))]}).verdict == HELD
    assert judge(AT_LEAST_ONE, {"r": [run(valid=False, cautions=(IDLE,))]}).verdict == BROKEN


@pytest.mark.parametrize("caution", [STEAL, FOREIGN])
@pytest.mark.parametrize("valid,figure", [(True, 1.0), (True, 0.5), (False, 1.0)])
def test_twice_disturbed_from_outside_is_inconclusive_whatever_the_figure(caution, valid, figure):
    """Never counted as held, even where the claim held on the disturbed run; the cause is said."""
    attempts = [run(valid=valid, cautions=(caution,), figure=figure) for _ in range(2)]
    v = judge(AT_LEAST_ONE, {"r": attempts})
    assert v.verdict == INCONCLUSIVE and v.attempts == 2
    said = "hypervisor steal 6.1% (limit 1%)" if caution is STEAL else "foreign CPU 5.5% (limit 5%): process_api pid 1"
    assert said in v.why, v.why
    assert v.figure == str(figure)


def test_a_disturbed_run_is_measured_once_more_and_the_second_is_judged():
    calls = []

    def measure(attempt: int) -> Run:
        calls.append(attempt)
        return run(cautions=(STEAL,)) if attempt == 1 else run(figure=0.5)

    attempts = measure_twice(measure, lambda _: None)
    assert calls == [1, 2] and len(attempts) == 2
    assert judge(AT_LEAST_ONE, {"r": attempts}).verdict == BROKEN  # the quiet second run missed


def test_never_a_third_time_and_a_quiet_run_never_twice():
    calls = []

    def disturbed(attempt: int) -> Run:
        calls.append(attempt)
        return run(cautions=(FOREIGN,))

    assert len(measure_twice(disturbed, lambda _: None)) == 2 and calls == [1, 2]
    assert len(measure_twice(lambda k: run(), lambda _: None)) == 1


def test_a_run_that_did_not_finish_is_broken_and_says_why():
    v = judge(AT_LEAST_ONE, {"r": [Run("r", error="exit 1: the delay line exited")]})
    assert v.verdict == BROKEN and "did not finish: exit 1: the delay line exited" in v.why


def test_a_claim_on_two_runs_takes_the_worst_of_them():
    both = Claim("both", "", ("a", "b"), lambda d: Check(True, "ok"))
    assert judge(both, {"a": [run("a")], "b": [run("b")]}).verdict == HELD
    assert judge(both, {"a": [run("a")], "b": [run("b", valid=False)]}).verdict == BROKEN
    disturbed = [run("b", cautions=(STEAL,))] * 2
    assert judge(both, {"a": [run("a")], "b": disturbed}).verdict == INCONCLUSIVE
    assert judge(both, {"a": [run("a", valid=False)], "b": disturbed}).verdict == INCONCLUSIVE


def test_a_check_that_cannot_be_made_on_a_valid_run_is_broken():
    v = judge(Claim("c", "", ("r",), lambda d: Check(d["r"]["absent"] > 0, "")), {"r": [run()]})
    assert v.verdict == BROKEN and "could not be made" in v.why


def test_the_summary_counts_each_verdict():
    vs = [judge(AT_LEAST_ONE, {"r": [run()]}), judge(AT_LEAST_ONE, {"r": [run(figure=0)]})]
    assert summary(vs) == "claims: 1 held, 1 broken, 0 inconclusive"


def test_every_claim_has_a_planted_fault_that_must_break_it_and_every_fault_breaks_a_claim():
    claims = [c.name for s in SCENARIOS for c in s.claims]
    assert len(claims) == len(set(claims))
    broken_by = {c for names in FAULTS_BREAK.values() for c in names}
    assert set(claims) == broken_by, set(claims) ^ broken_by
    assert set(FAULTS_BREAK) == set(faults.FAULTS)
    for s in SCENARIOS:
        names = {c.name for c in s.commands}
        assert len(names) == len(s.commands) and all(set(c.runs) <= names for c in s.claims), s.name
