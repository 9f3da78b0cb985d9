"""Properties of the closed-form models over generated inputs: monotone where the physics says so,
and inverses that round-trip (theory/model.py). Each is one property over many cases (Hypothesis)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from bufsize.theory.model import (
    buffer_for_overflow_probability,
    burst_moments,
    loss_rate_persistent,
    mathis_throughput_pps,
    overflow_probability,
    single_flow_utilization,
    slow_start_bursts,
    stanford_packets,
    utilization_lower_bound,
)

bdp = st.floats(min_value=1.0, max_value=1e5)
buffers = st.floats(min_value=0.0, max_value=1e5)
flows = st.integers(min_value=1, max_value=10_000)
loads = st.floats(min_value=0.05, max_value=0.95)
CASES = settings(max_examples=300, deadline=None)  # each property over this many generated cases


@CASES
@given(bdp, buffers, buffers, flows)
def test_the_utilization_bound_rises_with_the_buffer_and_stays_a_fraction(b, x, y, n):
    lo, hi = sorted((x, y))
    a, c = utilization_lower_bound(lo, b, n), utilization_lower_bound(hi, b, n)
    assert 0.0 <= a <= c <= 1.0


@CASES
@given(bdp, st.floats(min_value=0.01, max_value=1e5), flows, flows)
def test_the_utilization_bound_rises_with_the_flows(b, buffer, n, m):
    few, many = sorted((n, m))
    assert utilization_lower_bound(buffer, b, few) <= utilization_lower_bound(buffer, b, many) + 1e-12


@CASES
@given(bdp, buffers, buffers)
def test_one_flows_sawtooth_rises_from_three_quarters_to_one_at_a_bdp(b, x, y):
    lo, hi = sorted((x, y))
    u_lo, u_hi = single_flow_utilization(lo, b), single_flow_utilization(hi, b)
    assert 0.75 - 1e-12 <= u_lo <= u_hi + 1e-12 <= 1.0 + 1e-12
    assert math.isclose(single_flow_utilization(0.0, b), 0.75)
    assert single_flow_utilization(b, b) == 1.0


@CASES
@given(st.floats(min_value=0.001, max_value=10.0), st.floats(min_value=1e3, max_value=1e11), flows, flows)
def test_the_sqrt_n_buffer_falls_with_the_flows_as_one_over_sqrt_n(rtt, rate, n, m):
    few, many = sorted((n, m))
    a, c = stanford_packets(rtt, rate, few), stanford_packets(rtt, rate, many)
    assert c <= a
    assert math.isclose(a * math.sqrt(few), c * math.sqrt(many), rel_tol=1e-9)


@CASES
@given(st.integers(1, 1000), st.integers(1, 1000), bdp, buffers, buffers)
def test_loss_of_persistent_flows_grows_with_the_flows_and_falls_with_the_buffer(n, m, b, x, y):
    few, many = sorted((n, m))
    lo, hi = sorted((x, y))
    assert loss_rate_persistent(few, b, lo) <= loss_rate_persistent(many, b, lo)
    assert loss_rate_persistent(few, b, hi) <= loss_rate_persistent(few, b, lo)


@CASES
@given(st.floats(min_value=1e-4, max_value=10.0), st.floats(min_value=1e-8, max_value=0.5))
def test_mathis_rate_and_loss_round_trip(rtt, p):
    """F15 and F16 are one law: the rate a loss rate gives, solved back for the loss rate, is it."""
    rate = mathis_throughput_pps(rtt, p)
    assert math.isclose((0.87 / (rtt * rate)) ** 2, p, rel_tol=1e-9)


@CASES
@given(st.integers(1, 200), st.sampled_from([1, 2, 4, 10]), loads, st.floats(min_value=1e-9, max_value=0.999),
       st.sampled_from([2, 3]))  # fmt: skip
def test_the_overflow_buffer_round_trips_and_falls_with_the_probability(flow, iw, load, p, order):
    m = burst_moments(slow_start_bursts(flow, iw))
    b = buffer_for_overflow_probability(p, load, m, order)
    assert b >= 0.0
    if b > 0:  # the third order's prefactor can put the whole tail below p: no buffer needed
        assert math.isclose(overflow_probability(b, load, m, order), p, rel_tol=1e-6)
    smaller_p = p / 10
    assert buffer_for_overflow_probability(smaller_p, load, m, order) >= b


@CASES
@given(st.integers(1, 200), loads, loads, st.floats(min_value=0.0, max_value=1e4))
def test_the_queue_tail_is_heavier_at_a_higher_load(flow, x, y, buffer):
    lo, hi = sorted((x, y))
    m = burst_moments(slow_start_bursts(flow, 2))
    assert overflow_probability(buffer, lo, m) <= overflow_probability(buffer, hi, m) + 1e-15
