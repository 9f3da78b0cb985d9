"""Property-based tests (Hypothesis) of what users and files feed the toolkit (issue 32, item 6).

- Any value for any option of any command: accepted (the command goes on to the work that needs
  root, where a tripwire stops it) or refused with status 2 in one line, never a traceback.
- `bufsize plot` on any result.json and CSV content: plots or one line, status 2.
- Resuming a sweep from any manifest.json: resumed or refused in one line.
test_bad_input.py keeps its fixed matrix as the floor; these draw values nobody thought of.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_bad_input import BASE, NOT_IN_MATRIX, ReachedRoot, in_process, subparsers, value_options, with_out

from bufsize.longlived.sweep import existing_manifest, make_spec
from bufsize.topologies.errors import UsageError

__all__ = ["in_process"]  # the fixture, used here by name


def examples(n: int) -> settings:
    """n examples, the same ones every run (derandomize: CI must not fail on a draw it cannot repeat;
    a new value found by hand goes in as a fixed case); fixtures shared by the examples are fine here."""
    return settings(
        max_examples=n,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


OPTIONS = sorted(
    (cmd, opt) for cmd, p in subparsers().items() if cmd in BASE for opt in value_options(p) if opt not in NOT_IN_MATRIX
)
VALUES = st.one_of(
    st.text(max_size=24),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(10**40), max_value=10**40).map(str),
    st.lists(st.integers(min_value=-5, max_value=2000), min_size=1, max_size=5).map(lambda v: ",".join(map(str, v))),
    st.sampled_from(["0", "1", "2", "10", "0.5", "1e-300", "1e300", "20..80", "-0", "0x10", "1_000"]),
)


@examples(400)
@given(option=st.sampled_from(OPTIONS), value=VALUES)
def test_any_option_value_is_accepted_or_refused_in_one_line(in_process, tmp_path, option, value) -> None:
    cmd, opt = option
    base = BASE[cmd]
    if opt in ("--buffer-bytes", "--buffer-packets") and cmd in ("measure", "shortflows"):
        base = [a for a in base if a not in ("--buffer-packets", "10")]
    argv = with_out([cmd, *base, f"{opt}={value}"], tmp_path / "out")
    try:
        code, err = in_process(argv)
    except ReachedRoot:
        return  # accepted: validation passed and the command went on
    assert "Traceback" not in err, err
    if code == 0:
        assert cmd == "model", (argv, err)  # the one command that needs no root runs to the end
        return
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (argv, code, err)


JSON = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=12,
)
RESULT_KEYS = ["nominal_rate_mbps", "bdp_packets", "buffer_bytes", "flows", "cc", "config", "points", "fidelity"]
RESULTS = st.one_of(
    JSON.map(json.dumps),
    st.dictionaries(st.sampled_from(RESULT_KEYS), JSON, max_size=6).map(json.dumps),
    st.text(max_size=40),
)
CSV_HEADS = ["t_s,rate_mbps", "t_s,backlog_packets,backlog_bytes,limit_bytes,drops", "t_s,flows,cwnd_sum,limit"]
CSVS = st.one_of(
    st.none(),
    st.text(max_size=60),
    st.tuples(st.sampled_from(CSV_HEADS), st.lists(st.lists(VALUES, max_size=5).map(",".join), max_size=5)).map(
        lambda hr: "\n".join([hr[0], *hr[1]]) + "\n"
    ),
)


@examples(40)
@given(result=RESULTS, rate=CSVS, queue=CSVS)
def test_plot_on_any_result_and_csv_content_plots_or_says_why(in_process, tmp_path, result, rate, queue) -> None:
    d = tmp_path / "run"
    d.mkdir(exist_ok=True)
    (d / "result.json").write_text(result)
    for name, text in (("rate.csv", rate), ("queue.csv", queue)):
        (d / name).unlink(missing_ok=True)
        if text is not None:
            (d / name).write_text(text)
    code, err = in_process(["plot", str(d)])
    assert "Traceback" not in err, err
    assert code == 0 or (code == 2 and len(err.strip().splitlines()) == 1), (code, err)


SPEC = make_spec(None, [2], {"shaper": "line"}, {})
OWN = {"spec": SPEC.to_dict(), "machine": {"shaper": "line"}}


def changed(key: str, value: object) -> dict:
    """This spec's own manifest with one setting changed (a key of the spec or of its search)."""
    spec = json.loads(json.dumps(OWN["spec"]))
    (spec["search"] if key in spec["search"] else spec)[key] = value
    return {"spec": spec, "machine": OWN["machine"]}


SETTINGS = sorted(k for k in {*OWN["spec"], *OWN["spec"]["search"]} if k not in ("search", "runs"))
MANIFESTS = st.one_of(
    JSON.map(json.dumps),
    st.dictionaries(st.sampled_from(["spec", "machine"]), JSON, max_size=2).map(json.dumps),
    st.text(max_size=40),
    st.just("[" * 5000),  # nested past the parser's recursion limit
    # The resume branch: the sweep's own manifest, with one setting changed or with more runs asked.
    st.just(json.dumps(OWN)),
    st.builds(lambda k, v: json.dumps(changed(k, v)), st.sampled_from(SETTINGS), JSON),
    st.integers(1, 5).map(lambda fewer: json.dumps(changed("runs", max(0, SPEC.runs - fewer)))),
)


@examples(300)
@given(text=MANIFESTS)
def test_resuming_from_any_manifest_resumes_or_refuses_in_one_line(tmp_path, text) -> None:
    """The sweep's own manifest is resumed (and one made with fewer runs a point, grown); any other
    is refused in one line that names a changed setting, never a traceback."""
    out = tmp_path / "sweep"
    out.mkdir(exist_ok=True)
    (out / "manifest.json").write_text(text)
    try:
        manifest = existing_manifest(out, SPEC)
    except UsageError as e:
        assert "\n" not in str(e)
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):  # the same text the refusal read
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("spec"), dict) and doc["spec"] != OWN["spec"]:
            assert "different settings" in str(e) or "not a sweep manifest" in str(e), str(e)
        assert text != json.dumps(OWN), str(e)  # the sweep's own manifest is never refused
        return
    assert isinstance(manifest, dict)
    old = manifest["spec"]
    grown = old | {"runs": SPEC.runs} == OWN["spec"] and isinstance(old.get("runs"), int) and old["runs"] < SPEC.runs
    assert old == OWN["spec"] or grown, old  # only this very spec is resumed, or grown to more runs


def test_the_option_list_covers_every_command() -> None:
    assert {cmd for cmd, _ in OPTIONS} == set(BASE) - {"plot"}
    assert len(OPTIONS) > 100


@pytest.mark.parametrize("text", ["{}", "[1]", "x", '{"nominal_rate_mbps": "x"}', '{"config": 3}'])
def test_plot_cases_the_issue_names(in_process, tmp_path: Path, text: str) -> None:
    d = tmp_path / "run"
    d.mkdir()
    (d / "result.json").write_text(text)
    (d / "rate.csv").write_text("t_s,rate_mbps\n0,1\n1,x\n")
    code, err = in_process(["plot", str(d)])
    assert code in (0, 2) and "Traceback" not in err, err
