"""Validation of what users type, without touching the machine."""

import math
import os

import pytest

from buffersizing.options import buffer_from_args
from topologies import FRAME_BYTES
from topologies.config import DumbbellConfig, parse_rtts, resolve_shaper
from topologies.errors import UsageError


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
    "requested,backend,hosts,cpus,expected",
    [
        ("auto", "delayline", 2, 2, "line"),
        ("auto", "delayline", 100, 2, "line"),
        ("auto", "delayline", 101, 2, "htb"),  # the other CPU could not keep up with the traffic
        ("auto", "delayline", 400, 2, "htb"),
        ("auto", "delayline", 300, 4, "line"),
        ("auto", "delayline", 2, 1, "htb"),  # one CPU: the line's spinning would starve the senders
        ("auto", "netem", 2, 8, "htb"),  # no delay line under netem
        ("tbf", "delayline", 2, 2, "tbf"),
        ("htb", "delayline", 2, 2, "htb"),
        ("line", "delayline", 400, 1, "line"),  # asked for by name: honoured
    ],
)
def test_auto_shaper_resolution(requested, backend, hosts, cpus, expected):
    assert resolve_shaper(requested, backend, hosts, cpus) == expected


def test_for_backend_resolves_and_refuses_the_line_under_netem():
    assert DumbbellConfig(shaper="tbf").for_backend("delayline").shaper == "tbf"
    assert DumbbellConfig(shaper="auto").for_backend("netem").shaper == "htb"
    with pytest.raises(UsageError, match="delay-backend delayline"):
        DumbbellConfig(shaper="line").for_backend("netem")


def test_a_sweeps_manifest_names_the_shaper_of_each_n():
    from buffersizing.sweep import make_spec, sweep_shapers

    spec = make_spec(None, [2, 100, 800], {"shaper": "auto"}, {})
    cpus = len(os.sched_getaffinity(0))
    if cpus == 2:
        assert sweep_shapers(spec, "delayline") == "auto: line for N=2,100; htb for N=800"
    assert sweep_shapers(spec, "netem") == "htb"
    assert sweep_shapers(make_spec(None, [2, 800], {"shaper": "tbf"}, {}), "delayline") == "tbf"
