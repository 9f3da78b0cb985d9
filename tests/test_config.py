"""Validation of what users type, without touching the machine."""

import math
from pathlib import Path

import pytest
from conftest import spec_of

from bufsize.cli.options import buffer_from_args
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.config import (
    LINE_MAX_HOSTS_PER_CPU,
    LINE_MAX_RATE_MBPS_PER_CPU,
    DumbbellConfig,
    line_capacity_warning,
    parse_rtts,
    resolve_shaper,
    shaper_choice,
)
from bufsize.topologies.errors import MachineError, UsageError
from bufsize.topologies.machine import resolve_backend

REPO = Path(__file__).resolve().parents[1]


def test_single_rtt_applies_to_every_host():
    assert parse_rtts("87", 3) == [87.0, 87.0, 87.0]


def test_range_spreads_evenly_from_low_to_high():
    v = parse_rtts("20..300", 5)
    assert v[0] == 20 and v[-1] == 300
    steps = {round(b - a, 9) for a, b in zip(v, v[1:], strict=False)}
    assert steps == {70.0}


def test_range_with_one_host_uses_the_low_end():
    assert parse_rtts("20..300", 1) == [20.0]


def test_list_needs_one_value_per_host():
    assert parse_rtts("10,20", 2) == [10.0, 20.0]
    with pytest.raises(UsageError, match="one RTT per host"):
        parse_rtts("10,20", 3)


@pytest.mark.parametrize("spec", ["-1", "abc", "300..20", "5,-3", "nan", "1e9"])
def test_bad_rtt_specs_are_refused(spec):
    n = 2 if "," in spec else 1
    with pytest.raises(UsageError, match="--rtt-ms"):
        parse_rtts(spec, n)


@pytest.mark.parametrize(
    "field,value,needle",
    [
        ("hosts", 0, "--hosts 0"),
        ("hosts", 401, "--hosts 401"),
        ("rate_mbps", 0.0, "--rate-mbps 0"),
        ("rate_mbps", -5.0, "--rate-mbps -5"),
        ("rate_mbps", math.inf, "--rate-mbps inf"),
        ("buffer_bytes", FRAME_BYTES - 1, "at least one packet"),
        ("cc", "nosuchcc", "--cc nosuchcc"),
        ("shaper", "red", "--shaper red"),
        ("delay_backend", "magic", "--delay-backend magic"),
        ("access_mbps", 10.0, "--access-mbps 10"),
    ],
)
def test_bad_config_names_the_value(field, value, needle):
    cfg = DumbbellConfig()
    if field == "hosts":
        cfg.rtt_ms = [87.0] * max(value, 1)
    setattr(cfg, field, value)
    with pytest.raises(UsageError) as e:
        cfg.validate()
    assert needle in str(e.value)


def test_default_config_is_valid_and_buffer_defaults_to_bdp():
    cfg = DumbbellConfig()
    cfg.validate()
    # 62.5 Mb/s x 87 ms = 679,687 bytes, about 449 full frames
    assert cfg.initial_buffer_bytes() == 679687


def test_buffer_packets_convert_to_full_frames():
    assert buffer_from_args(None, 2) == 2 * FRAME_BYTES
    with pytest.raises(UsageError, match="at least 1 packet"):
        buffer_from_args(None, 0.5)
    with pytest.raises(UsageError, match="not both"):
        buffer_from_args(3000, 2)


@pytest.mark.parametrize(
    "rate,expected",
    [(62.5, 10 * FRAME_BYTES), (200.0, 10 * FRAME_BYTES), (20.0, 5000), (5.0, FRAME_BYTES), (0.1, FRAME_BYTES)],
)
def test_htb_default_burst_is_two_ms_of_the_rate_within_one_to_ten_frames(rate, expected):
    cfg = DumbbellConfig(rate_mbps=rate, shaper="htb")
    assert cfg.shaper_burst == expected
    # At most 2 ms ahead of C at any rate above the one-frame floor.
    assert cfg.shaper_burst <= max(FRAME_BYTES, rate * 1e6 / 8 * 0.002 + 1)


def test_explicit_burst_tbf_and_pacer_defaults():
    assert DumbbellConfig(burst_bytes=3028).shaper_burst == 3028
    assert DumbbellConfig(shaper="tbf").shaper_burst == 2 * FRAME_BYTES
    assert DumbbellConfig(shaper="htb", pacer=True).shaper_burst == FRAME_BYTES
    with pytest.raises(ValueError, match="resolve auto first"):
        _ = DumbbellConfig(shaper="auto").shaper_burst


@pytest.mark.parametrize(
    "requested,backend,cpus,expected",
    [
        ("auto", "delayline", 2, "line"),  # at any host count: beyond the envelope it warns, not switches
        ("auto", "delayline", 4, "line"),
        ("tbf", "delayline", 2, "tbf"),
        ("htb", "delayline", 2, "htb"),
        ("htb", "netem", 2, "htb"),
        ("line", "delayline", 1, "line"),  # asked for by name: honoured
    ],
)
def test_auto_shaper_resolution(requested, backend, cpus, expected):
    assert resolve_shaper(requested, backend, cpus) == expected


@pytest.mark.parametrize(
    "backend,cpus,match",
    [("netem", 8, "--delay-backend netem"), ("delayline", 1, "1 CPU")],
)
def test_auto_refuses_where_the_line_cannot_run_instead_of_falling_back(backend, cpus, match):
    with pytest.raises(UsageError, match=match) as e:
        resolve_shaper("auto", backend, cpus)
    assert "--shaper htb or tbf" in str(e.value)


def test_auto_says_why_and_warns_beyond_the_measured_envelope():
    used, why = shaper_choice("auto", "delayline", cpus=2)
    assert used == "line" and "default" in why
    assert shaper_choice("htb", "netem", cpus=2) == ("htb", "asked for (--shaper)")
    assert line_capacity_warning("line", LINE_MAX_HOSTS_PER_CPU, cpus=2) is None
    warning = line_capacity_warning("line", LINE_MAX_HOSTS_PER_CPU + 1, cpus=2)
    assert warning is not None and f"{LINE_MAX_HOSTS_PER_CPU + 1} sender hosts" in warning
    assert line_capacity_warning("line", 3 * LINE_MAX_HOSTS_PER_CPU, cpus=4) is None
    assert line_capacity_warning("htb", 400, cpus=2) is None
    assert line_capacity_warning("line", 400, cpus=2, rate_mbps=LINE_MAX_RATE_MBPS_PER_CPU) is None
    fast = line_capacity_warning("line", 20, cpus=2, rate_mbps=1000)
    assert fast is not None and "1000 Mb/s" in fast and "hosts (" not in fast
    assert line_capacity_warning("line", 20, cpus=8, rate_mbps=1000) is None


def test_for_backend_resolves_and_refuses_the_line_under_netem(monkeypatch):
    monkeypatch.setattr("bufsize.topologies.config.os.sched_getaffinity", lambda pid: {0, 1})  # as on 2 CPUs
    assert DumbbellConfig(shaper="tbf").for_backend("delayline").shaper == "tbf"
    assert DumbbellConfig(shaper="auto").for_backend("delayline").shaper == "line"
    with pytest.raises(UsageError, match="--shaper htb or tbf"):
        DumbbellConfig(shaper="auto").for_backend("netem")
    with pytest.raises(UsageError, match="delay-backend delayline"):
        DumbbellConfig(shaper="line").for_backend("netem")


def test_auto_delay_backend_is_the_delay_line_for_the_line_even_with_netem():
    netem = {"netem": True}
    assert resolve_backend("auto", netem, True, "auto") == "delayline"
    assert resolve_backend("auto", netem, True, "line") == "delayline"
    assert resolve_backend("auto", netem, True, "htb") == "netem"  # a kernel shaper keeps netem
    assert resolve_backend("auto", {"netem": False}, True, "tbf") == "delayline"
    with pytest.raises(MachineError, match="not built"):
        resolve_backend("auto", netem, False, "auto")  # never a silent netem + HTB


def test_a_sweep_pins_auto_to_the_line_and_names_one_shaper():
    from bufsize.longlived.sweep import make_spec, sweep_shapers

    spec = make_spec(None, [2, 100, 800], {"shaper": "auto"}, {})
    assert spec.shaper == "line"
    assert sweep_shapers(spec, "delayline") == "line"
    assert sweep_shapers(make_spec(None, [2, 800], {"shaper": "tbf"}, {}), "delayline") == "tbf"
    with pytest.raises(UsageError, match="--shaper htb or tbf"):
        make_spec(None, [2], {"shaper": "auto", "delay_backend": "netem"}, {})
    for name in ("quick", "full", "theory"):
        assert make_spec(name, None, {}, {}).shaper == "line"
        assert make_spec(name, None, {"shaper": "htb"}, {}).shaper == "htb"  # the user's explicit choice


def test_a_sweep_made_before_the_pin_resumes_and_another_shaper_is_refused(tmp_path):
    import json

    from bufsize.longlived.sweep import check_same_shaper, existing_manifest, make_spec

    spec = make_spec(None, [2, 10], {}, {})
    old = spec.to_dict() | {"shaper": "auto"}  # written before sweeps pinned auto
    (tmp_path / "manifest.json").write_text(json.dumps({"spec": old, "machine": {"shaper": "line"}}))
    manifest = existing_manifest(tmp_path, spec)
    assert manifest is not None
    check_same_shaper(manifest, "line", allow_mixed=False)
    (tmp_path / "manifest.json").write_text(json.dumps({"spec": old, "machine": {"shaper": "htb"}}))
    with pytest.raises(UsageError, match="different settings"):
        existing_manifest(tmp_path, spec)  # auto then ran HTB: not the same sweep
    mixed = {"machine": {"shaper": "auto: line for N=2; htb for N=800"}}
    with pytest.raises(UsageError, match="--allow-mixed-shapers"):
        check_same_shaper(mixed, "line", allow_mixed=False)
    check_same_shaper(mixed, "line", allow_mixed=True)


@pytest.mark.usefixtures("schema_check_off")  # the manifest's machine is a stand-in
def test_a_sweep_resumed_with_more_runs_keeps_its_runs_and_records_the_change(tmp_path):
    """A larger --runs is the same sweep with more runs a point: resumed, and the manifest then holds
    the new count and when it changed. Fewer runs, or more runs with anything else changed, is refused."""
    import json

    from bufsize.longlived.sweep import emulated_runner, existing_manifest, make_spec, open_sweep

    one = make_spec(None, [2, 10], {"runs": 1, "shaper": "line"}, {})
    (tmp_path / "manifest.json").write_text(json.dumps({"spec": one.to_dict(), "machine": {"shaper": "line"}}))
    three = make_spec(None, [2, 10], {"runs": 3, "shaper": "line"}, {})
    with pytest.raises(UsageError, match=r"different settings \(cc, runs\)"):
        existing_manifest(tmp_path, make_spec(None, [2, 10], {"runs": 3, "shaper": "line", "cc": "reno"}, {}))
    runner = emulated_runner(tmp_path, three, "delayline", print)
    open_sweep(tmp_path, three, runner)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["spec"] == three.to_dict() and manifest["machine"] == {"shaper": "line"}
    assert [(a["from"], a["to"]) for a in manifest["runs_added"]] == [(1, 3)]
    open_sweep(tmp_path, three, runner)  # resumed again with the same count: nothing added
    assert len(json.loads((tmp_path / "manifest.json").read_text())["runs_added"]) == 1
    with pytest.raises(UsageError, match=r"different settings \(runs\)"):
        existing_manifest(tmp_path, one)
    # `bufsize remote` writes its merged manifest through the same record.
    from bufsize.remote.plan import merged_manifest

    merged = merged_manifest({"spec": one.to_dict(), "machine": {"shaper": "line"}}, three, "abc", {})
    assert merged["spec"] == three.to_dict() and [(a["from"], a["to"]) for a in merged["runs_added"]] == [(1, 3)]
    assert "runs_added" not in merged_manifest(None, three, "abc", {})
    assert merged_manifest(merged, three, "abc", {})["runs_added"] == merged["runs_added"]


def test_a_sweep_made_before_precision_existed_resumes_but_not_with_precision_asked(tmp_path):
    """Sweeps committed before --precision and --sample-length have none of these in their search
    options: they ran the sign test (what precision 0 means) on the model's sample lengths, so the
    command that made them, with those two given, resumes them; asked for another rule, they are
    another sweep, and the refusal names the option and both values."""
    import json

    from bufsize.longlived.sweep import existing_manifest, make_spec

    sign_test = {"precision": 0.0}
    spec = make_spec(None, [2, 10], {"sample_length": "model"}, sign_test)
    assert spec.search["sample_length"] == "model"
    assert make_spec(None, [2, 10], {}, {}).search["sample_length"] == "measured"  # the default without one
    old = spec.to_dict()
    old["search"] = {k: v for k, v in old["search"].items() if k not in ("precision", "level", "sample_length")}
    (tmp_path / "manifest.json").write_text(json.dumps({"spec": old, "machine": {"shaper": "line"}}))
    assert existing_manifest(tmp_path, spec) is not None
    with pytest.raises(UsageError, match="sample_length was 'model', now 'measured'"):
        existing_manifest(tmp_path, make_spec(None, [2, 10], {}, sign_test))
    precise = make_spec(None, [2, 10], {"sample_length": "model"}, {"precision": 0.1})
    assert precise.search["precision"] == 0.1 and precise.search["max_samples"] == 0 and precise.search["samples"] == 3
    with pytest.raises(UsageError, match="different settings.*search.*precision was 0.0, now 0.1"):
        existing_manifest(tmp_path, precise)
    # Given explicitly, samples stay as asked; and --max-samples with --precision is refused.
    assert make_spec(None, [2], {"samples": 5}, {"precision": 0.1}).search["samples"] == 5
    with pytest.raises(UsageError, match="--precision replaces the sequential test"):
        make_spec(None, [2], {"max_samples": 20}, {"precision": 0.1})


def test_the_quick_preset_runs_the_precision_rule_and_a_committed_quick_run_before_it_is_another_sweep(tmp_path):
    """Since 2026-11-26 late the quick preset searches by the precision rule at +-20 % on measured
    samples (11-14 minutes against 16-18, then without N = 2); --precision 0 gives back its old
    decision rule, and a quick directory of the rule before is refused, not resumed with another rule."""
    import json

    from bufsize.longlived.sweep import existing_manifest, make_spec

    quick = make_spec("quick", None, {}, {})
    assert quick.search["precision"] == 0.2 and quick.search["sample_length"] == "measured"
    # Since 2026-11-28 without N = 2 (presets.py says why): every N it runs has the hardware's runs.
    from bufsize.longlived.report import HARDWARE_TSV, REFERENCE_DIR, reference_runs

    assert quick.flows == [10, 50, 200, 800]
    assert set(quick.flows) <= set(reference_runs(HARDWARE_TSV, REFERENCE_DIR))
    assert quick.search["max_samples"] == 0 and quick.search["samples"] == 3
    assert make_spec("quick", None, {}, {"precision": 0.1}).search["precision"] == 0.1
    assert make_spec("quick", None, {}, {"precision": 0.0}).search["precision"] == 0.0
    # The same through the command line: `bufsize sweep --preset quick` ran with precision 0 (the
    # parser's default hid the preset's rule) until 2026-11-27, unlike `bufsize quick`.
    assert spec_of("--preset", "quick").search == quick.search
    assert spec_of("--preset", "quick", "--precision", "0").search["precision"] == 0.0
    assert spec_of("--preset", "quick", "--precision", "0.1").search["precision"] == 0.1
    # No preset named: the published figures' method (the full preset's rule, link and hosts), one run.
    bare = spec_of("--flows", "10")
    full = spec_of("--preset", "full", "--flows", "10", "--runs", "1")
    assert bare.to_dict() == full.to_dict() and bare.search["precision"] == 0.1 and bare.max_hosts == 400
    committed = json.loads((REPO / "results" / "quick" / "2026-11-26-130743" / "manifest.json").read_text())
    (tmp_path / "manifest.json").write_text(json.dumps(committed))
    with pytest.raises(UsageError, match="different settings"):
        existing_manifest(tmp_path, quick)


def test_the_full_preset_is_the_committed_precision_sweep_and_resumes_it(tmp_path):
    """Since 2026-11-27 the full preset is the precision rule at +-10 % on measured samples, 3 runs:
    exactly the sweep committed in results/full/2026-11-27/ (made by `--preset full --precision 0.1
    --sample-length measured --runs 3` before the preset changed), so `bufsize sweep --preset full
    --max-sample-steal 0 --out results/full/2026-11-27` resumes it (every sample counted then; the
    preset alone is refused, naming the option); the sweep of the rule before is another sweep."""
    import json

    from bufsize.longlived.sweep import existing_manifest, make_spec

    full = make_spec("full", None, {}, {"max_sample_steal": 0.0})
    assert full.runs == 3 and full.search["precision"] == 0.1 and full.search["sample_length"] == "measured"
    assert full.search["samples"] == 3 and full.search["max_samples"] == 0
    preset_alone = make_spec("full", None, {}, {})
    assert preset_alone.search == full.search | {"max_sample_steal": 0.005}
    for committed, same in (("2026-11-27", True), ("2026-11-25", False)):
        d = tmp_path / committed
        d.mkdir()
        manifest = json.loads((REPO / "results" / "full" / committed / "manifest.json").read_text())
        manifest["spec"]["cc"] = full.cc  # bic where the kernel has it, else cubic: this machine's choice
        (d / "manifest.json").write_text(json.dumps(manifest))
        if same:
            assert existing_manifest(d, full) is not None
            with pytest.raises(UsageError, match="max_sample_steal was 0.0, now 0.005"):
                existing_manifest(d, preset_alone)
        else:
            with pytest.raises(UsageError, match="different settings"):
                existing_manifest(d, full)


def test_the_theory_preset_is_the_precision_rule_and_its_sign_test_sweep_resumes_by_its_own_flags(tmp_path):
    """Since 2026-11-28 the theory preset searches like the full one (Reno, +-10 % at 90 % on measured
    samples, 3 runs). The committed sign-test sweep (results/theory/2026-11-25/) is another sweep to
    the preset, and the flags presets.py names give it back exactly, so that command resumes it."""
    import json

    from bufsize.longlived.sweep import existing_manifest

    theory = spec_of("--preset", "theory")
    assert theory.cc == "reno" and theory.runs == 3 and theory.max_hosts == 400
    assert theory.search["precision"] == 0.1 and theory.search["sample_length"] == "measured"
    assert theory.search["samples"] == 3 and theory.search["max_samples"] == 0
    assert theory.search == spec_of("--preset", "full").search
    committed = REPO / "results" / "theory" / "2026-11-25" / "manifest.json"
    (tmp_path / "manifest.json").write_text(committed.read_text())
    with pytest.raises(UsageError, match="different settings"):
        existing_manifest(tmp_path, theory)
    old = spec_of("--preset", "theory", "--precision", "0", "--samples", "5", "--max-samples", "20",
                  "--sample-length", "model", "--runs", "5", "--hosts", "100", "--max-sample-steal", "0")  # fmt: skip
    assert existing_manifest(tmp_path, old) is not None
    assert json.loads(committed.read_text())["spec"]["runs"] == old.runs == 5
