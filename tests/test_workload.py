"""The short-flow workload's sizes and arrivals: parsing, means, and the statistics of draws."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.errors import UsageError
from bufsize.traffic.workload import (
    HEADER_BYTES,
    MSS_BYTES,
    SizeDistribution,
    Workload,
    expected_wire_bytes,
    open_loop_arrivals,
    parse_length,
    wire_bytes,
)


def test_lengths_are_packets_unless_given_in_bytes() -> None:
    assert parse_length("14") == 14 * MSS_BYTES
    assert parse_length("1500B") == 1500
    assert parse_length("20KB") == 20_000
    assert parse_length("1.5MB") == 1_500_000
    for bad in ("", "ten", "-3", "5GB", "1e"):
        with pytest.raises(UsageError):
            parse_length(bad)


@pytest.mark.parametrize(
    "spec",
    ["fixed", "fixed:0", "exp:-1", "expmix:0.5:10", "expmix:0.5@", "pareto:1.2", "pareto:0:10",
     "lnpareto:9:1:100KB:1.1:1.5", "web:1", "triangle:1:2", "fixed:14:15", "uniform:5:3", "uniform:3"],
)  # fmt: skip
def test_bad_size_specs_are_refused_with_the_spec_named(spec: str) -> None:
    with pytest.raises(UsageError, match="--sizes"):
        SizeDistribution.parse(spec)


def test_fixed_sizes_are_exact_and_floored_at_the_header() -> None:
    rng = random.Random(1)
    d = SizeDistribution.parse("fixed:14")
    assert {d.draw(rng) for _ in range(50)} == {14 * MSS_BYTES}
    assert d.mean_bytes() == 14 * MSS_BYTES
    tiny = SizeDistribution.parse("fixed:3B")
    assert tiny.draw(rng) == HEADER_BYTES and tiny.mean_bytes() == HEADER_BYTES


@pytest.mark.parametrize(
    "spec", ["uniform:3:25", "exp:20", "expmix:0.9@5+0.1@200", "pareto:1.5:4", "lnpareto:9:1.2:50KB:1.3:0.1"]
)
def test_sample_means_match_the_stated_mean(spec: str) -> None:
    d = SizeDistribution.parse(spec, cap_bytes=2_000_000)
    rng = random.Random(7)
    xs = [d.draw(rng) for _ in range(200_000)]
    assert min(xs) >= HEADER_BYTES and max(xs) <= 2_000_000
    # The heavy tails converge slowly; 5 % still tells a wrong formula (a missing cap term is >20 %).
    assert statistics.fmean(xs) == pytest.approx(d.mean_bytes(), rel=0.05)


def test_capped_pareto_mean_is_the_closed_form() -> None:
    d = SizeDistribution.parse("pareto:1.1:10KB", cap_bytes=1_000_000)
    a, lo, c = 1.1, 10_000.0, 1_000_000.0
    expected = (a * lo - lo**a * c ** (1 - a)) / (a - 1)
    assert d.mean_bytes() == pytest.approx(expected)
    # Uncapped it would be a*lo/(a-1) = 110 KB; the cap must bring it well below that.
    assert d.mean_bytes() < 0.6 * a * lo / (a - 1)


def test_web_sizes_have_a_lognormal_body_and_a_heavy_tail() -> None:
    d = SizeDistribution.parse("web")
    rng = random.Random(3)
    xs = sorted(d.draw(rng) for _ in range(50_000))
    median = xs[len(xs) // 2]
    assert 5_000 < median < 20_000  # exp(9.357) = 11.6 KB, the body's median
    above_cut = sum(x >= 133_000 for x in xs) / len(xs)
    assert 0.07 <= above_cut < 0.12  # the 7 % tail plus the body's own share above the cut


def test_wire_bytes_count_frames_and_connection_overhead() -> None:
    overhead = FRAME_BYTES - MSS_BYTES
    assert wire_bytes(MSS_BYTES) == MSS_BYTES + overhead + 3 * overhead
    assert wire_bytes(MSS_BYTES + 1) == MSS_BYTES + 1 + 2 * overhead + 3 * overhead


def test_arrival_rate_offers_the_load_in_frames() -> None:
    w = Workload(sizes="fixed:10", load=0.8, transfers=10)
    rate = w.arrival_rate(62.5)
    assert rate * wire_bytes(10 * MSS_BYTES) * 8 == pytest.approx(0.8 * 62.5e6)
    d = SizeDistribution.parse("exp:10")
    assert expected_wire_bytes(d) > d.mean_bytes()


def test_poisson_arrivals_have_the_asked_rate_and_exponential_gaps() -> None:
    times = list(open_loop_arrivals(50.0, random.Random(11), None, 200.0))
    assert len(times) == pytest.approx(50 * 200, rel=0.05)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert statistics.fmean(gaps) == pytest.approx(0.02, rel=0.05)
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(1.0, abs=0.05)  # CV of exp is 1
    assert list(open_loop_arrivals(50.0, random.Random(11), 17, None)) == times[:17]
    assert all(t <= 200.0 for t in times)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({}, "no short flows"),
        ({"load": 0.5}, "--transfers or --duration"),
        ({"load": -0.1, "transfers": 5}, "--load"),
        ({"load": math.nan, "transfers": 5}, "--load"),
        ({"users": 3, "think_s": -1, "transfers": 5}, "--think-s"),
        ({"users": 3001, "transfers": 5}, "--users"),
        ({"load": 0.5, "transfers": 0}, "--transfers"),
        ({"load": 0.5, "duration_s": math.inf}, "--duration"),
    ],
)
def test_workload_refuses_what_cannot_run(kw: dict, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        Workload(**kw).validate()


@pytest.mark.parametrize("kind", ["exp", "pareto"])
def test_think_times_have_the_asked_mean(kind: str) -> None:
    from bufsize.traffic.workload import think_time

    w = Workload(users=1, think_s=3.0, think=kind, transfers=1)
    rng = random.Random(9)
    xs = [think_time(w, rng) for _ in range(400_000)]
    # Pareto with shape 1.5 has an infinite variance: its sample mean converges slowly.
    assert statistics.fmean(xs) == pytest.approx(3.0, rel=0.03 if kind == "exp" else 0.1)
    if kind == "pareto":
        assert min(xs) >= 1.0 - 1e-9  # SURGE's k = 1 s for a 3 s mean
    assert think_time(Workload(users=1, think_s=0, transfers=1), rng) == 0.0
    with pytest.raises(UsageError, match="--think"):
        Workload(users=1, think="weibull", transfers=1).validate()
