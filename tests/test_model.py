"""The closed-form models reproduce the worked numbers of the papers (docs/references.md, Formulas).

Published numbers are compared to the digits they are printed with: "98.99" must come out as
98.985..98.995. Where the source has a typo, the test pins what the formula gives and that it is not
the printed value.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path
from statistics import NormalDist

import pytest

from bufsize.cli import theory as model_cli
from bufsize.theory.model import (
    F7_K,
    BurstMoments,
    bdp_bits,
    bdp_packets,
    buffer_for_overflow_probability,
    burst_moments,
    flow_mix_moments,
    format_report,
    harmonic_mean_rtt_s,
    kappa_cramer,
    kappa_second_order,
    kappa_third_order,
    loss_rate_persistent,
    mathis_throughput_pps,
    md1_buffer_packets,
    md1_kappa,
    mean_queue_packets,
    mm1_mean_packets,
    mm1_tail_probability,
    morris_loss,
    overflow_probability,
    predict,
    queue_fill_time_s,
    rule_of_thumb_packets,
    sawtooth_period_s,
    sawtooth_queue_packets,
    sawtooth_window_packets,
    single_flow_utilization,
    slow_start_bursts,
    stanford_packets,
    sum_of_windows_normal,
    sum_of_windows_sd_packets,
    utilization_lower_bound,
    window_sd_packets,
)
from bufsize.topologies.errors import UsageError

REPO = Path(__file__).resolve().parents[1]
GSR_TABLE = "gsr-oc3-utilization-table.tsv"
# The repository's copy (what bufsize.longlived.report reads) and the shared original it was copied from.
GSR_TABLE_PATHS = [REPO / "results" / "reference" / GSR_TABLE, REPO.parent / "shared" / "reference" / GSR_TABLE]


def assert_printed(value: float, printed: str) -> None:
    """`value` rounds to `printed` at the number of decimals printed."""
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    assert abs(value - float(printed)) <= 0.5 * 10**-decimals + 1e-12, f"{value!r} does not print as {printed}"


def f7_pct(multiple: float, flows: int, bdp: float = 1000.0) -> float:
    """F7 in percent at B = multiple x BDP/sqrt(n)."""
    return 100 * utilization_lower_bound(multiple * bdp / math.sqrt(flows), bdp, flows)


# --- F1, F4, F20: the rules ----------------------------------------------------------------------


def test_seed_004_bdp_and_sqrt_n_curve():
    # 62.5 Mb/s x 87 ms = 679,688 B = 453.1 packets of 1500 B (section 5.5).
    assert_printed(bdp_bits(0.087, 62.5e6) / 8, "679688")
    assert_printed(rule_of_thumb_packets(0.087, 62.5e6), "453.1")
    assert rule_of_thumb_packets(0.087, 62.5e6) == bdp_packets(0.087, 62.5e6)
    curve = {2: "320.4", 4: "226.6", 10: "143.3", 20: "101.3", 50: "64.1", 100: "45.3", 200: "32.0", 800: "16.0"}
    curve |= {300: "26.2", 400: "22.7", 600: "18.5"}
    for n, printed in curve.items():
        assert_printed(stanford_packets(0.087, 62.5e6, n), printed)


def test_seed_000_fig11_model_buffers():
    # Section 1.5: 155 Mb/s, 80 ms: BDP 1033 packets of 1500 B, 1550 of 1000 B.
    assert_printed(bdp_packets(0.080, 155e6), "1033")
    assert_printed(bdp_packets(0.080, 155e6, 1000), "1550")
    for n, p1500, p1000 in [(250, "65", "98"), (300, "60", "89"), (400, "52", "78"), (500, "46", "69")]:
        assert_printed(stanford_packets(0.080, 155e6, n), p1500)
        assert_printed(stanford_packets(0.080, 155e6, n, packet_bytes=1000), p1000)


def test_seed_001_stanford_buffer_is_18_packets():
    # 50 Mb/s at an effective RTT of 60 ms is 250 packets; 250/sqrt(200) = 17.68 (section 2.5).
    assert_printed(bdp_packets(0.060, 50e6), "250")
    assert_printed(stanford_packets(0.060, 50e6, 200), "17.68")
    assert round(stanford_packets(0.060, 50e6, 200)) == 18


def test_slide_arithmetic_in_bits():
    # Section 0.1: 10 Gb/s x 250 ms = 2.5 Gbit; /sqrt(200,000) = 5.59 Mbit; 40 Gb/s: 10 Gbit/sqrt(40,000) = 50 Mbit;
    # 2.5 Gbit/sqrt(50,000) = 11.2 Mbit.
    assert bdp_bits(0.25, 10e9) == pytest.approx(2.5e9)
    assert_printed(bdp_bits(0.25, 10e9) / math.sqrt(200_000) / 1e6, "5.59")
    assert_printed(bdp_bits(0.25, 40e9) / math.sqrt(40_000) / 1e6, "50")
    assert_printed(bdp_bits(0.25, 10e9) / math.sqrt(50_000) / 1e6, "11.2")
    assert_printed(bdp_bits(0.25, 10e9) / 8 / 1e6, "312.5")  # "300Mbytes"


def test_harmonic_mean_rtt():
    assert harmonic_mean_rtt_s([1.0, 3.0]) == pytest.approx(1.5)  # not the arithmetic 2.0
    assert harmonic_mean_rtt_s([0.087]) == pytest.approx(0.087)
    with pytest.raises(ValueError):
        harmonic_mean_rtt_s([])
    with pytest.raises(ValueError):
        harmonic_mean_rtt_s([0.1, 0.0])


# --- F6, F7, F8: the Gaussian bound ----------------------------------------------------------------

F7_TABLE = {  # section 0.1: multiple -> {n: printed percent}
    0.5: {100: "78.398", 400: "79.497", 10000: "80.384"},
    1: {100: "98.182", 400: "98.665", 10000: "98.98990"},
    1.5: {100: "99.9298", 400: "99.9711", 10000: "99.98767"},
    2: {100: "99.99851", 400: "99.99977", 10000: "99.999965"},
    3: {100: "100.000", 400: "100.000", 10000: "100.000"},  # printed "≈100%"
}


@pytest.mark.parametrize("multiple", sorted(F7_TABLE))
def test_f7_table(multiple):
    for n, printed in F7_TABLE[multiple].items():
        assert_printed(f7_pct(multiple, n), printed)
        # Almost scale-free: only B/BDP and n matter, not the BDP itself.
        assert f7_pct(multiple, n, bdp=1291) == pytest.approx(f7_pct(multiple, n))


def test_f8_n_10000_printed_numbers():
    assert_printed(f7_pct(1, 10000), "98.99")
    # 2x: F7 gives 99.9999650 less 9e-11 (erfc agrees), which rounds to 99.99996, not the printed 99.99997.
    # The printed figure is the checklist's 99.999965 rounded half up again: one unit off in the last digit.
    assert_printed(f7_pct(2, 10000), "99.999965")
    assert_printed(100 - 100 * math.erfc(F7_K * 2 / 1.02), "99.99996")
    assert abs(f7_pct(2, 10000) - 99.99997) < 1e-5
    # The paper prints 99.99988% at 1.5x; F7 gives 99.98767% (a typo in the source: "99.988" would fit).
    assert_printed(f7_pct(1.5, 10000), "99.98767")
    assert_printed(f7_pct(1.5, 10000), "99.988")
    assert abs(f7_pct(1.5, 10000) - 99.99988) > 0.01


def test_seed_003_erf_constant_typo():
    assert F7_K == pytest.approx(1.837117, abs=5e-7)
    # Tomioka writes erf(3 sqrt 3/(2 sqrt 2)) = 0.9899; it is 0.9906. 0.9899 is F7 at n = 10000, B = 1x,
    # where the (BDP + B) denominator divides K by 1.01.
    assert_printed(math.erf(F7_K), "0.990625")
    assert abs(math.erf(F7_K) - 0.9899) > 5e-4
    assert_printed(math.erf(F7_K / 1.01), "0.989899")
    assert utilization_lower_bound(100, 10000, 10000) == pytest.approx(math.erf(F7_K / 1.01), rel=1e-12)


def test_f7_is_the_normal_model_probability_of_keeping_the_sum_of_windows_inside_the_buffer():
    for b, bdp, n in [(45.3, 453.1, 100), (129, 1291, 100), (18, 250, 200), (5, 1000, 10000)]:
        mean, sd = sum_of_windows_normal(b, bdp, n)
        inside = NormalDist(mean, sd).cdf(bdp + b) - NormalDist(mean, sd).cdf(bdp)
        assert inside == pytest.approx(utilization_lower_bound(b, bdp, n), rel=1e-9)
        assert mean == pytest.approx(bdp + b / 2)


def test_f6_sigmas():
    # A window uniform on [2/3 W, 4/3 W] has sd (2/3 W)/sqrt(12) = W/(3 sqrt 3).
    assert window_sd_packets(30.0) == pytest.approx((4 / 3 - 2 / 3) * 30 / math.sqrt(12))
    # n independent windows: sd grows as sqrt(n), each mean window is (BDP + B)/n.
    assert sum_of_windows_sd_packets(100, 1000, 100) == pytest.approx(1100 / (3 * math.sqrt(3) * 10))
    assert sum_of_windows_sd_packets(100, 1000, 400) == pytest.approx(sum_of_windows_sd_packets(100, 1000, 100) / 2)


def test_f7_grows_with_buffer_and_is_zero_without_one():
    us = [utilization_lower_bound(b, 1000, 100) for b in (0, 10, 50, 100, 200, 400)]
    assert us[0] == 0.0
    assert all(a < b for a, b in zip(us, us[1:], strict=False))


def read_gsr_rows(path: Path) -> list[dict[str, str]]:
    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t"))


def test_gsr_measurements_against_the_f7_bound():
    # The checklist (0.1, 1.5) says every Exp entry is >= F7. It holds where the bound bites (0.5x, and 1x for
    # n >= 200), but not in 7 of the 16 cells: at 2x and 3x F7 is 99.998..100% and the router measured
    # 99.7..99.9%, and at n = 100, 1x it measured 98.1% against a bound of 98.17% (the paper notes some
    # synchronization at n = 100, which F7 assumes away). No deficit exceeds 0.3 percentage points.
    paths = [p for p in GSR_TABLE_PATHS if p.exists()]
    assert GSR_TABLE_PATHS[0] in paths, "the repository's copy of the GSR table is missing"
    below = {(100, "1"), (100, "2"), (100, "3"), (200, "2"), (200, "3"), (300, "2"), (400, "3")}
    for path in paths:
        rows = read_gsr_rows(path)
        assert len(rows) == 16
        short = set()
        for r in rows:
            bound = 100 * utilization_lower_bound(float(r["buffer_packets"]), 1291, int(r["flows"]))
            exp = float(r["exp_pct"])
            if exp < bound:
                short.add((int(r["flows"]), r["multiple"]))
            assert exp >= bound - 0.3 - 1e-9, r
            if bound < 98.5:  # where the bound is informative it holds, by 0.9 pp or more
                assert (int(r["flows"]), r["multiple"]) == (100, "1") or exp >= bound + 0.9, r
        assert short == below, path


def test_gsr_model_column_is_not_f7():
    # Section 0.1: F7 at the table's buffers gives 78.0/79.4/79.0/79.1% at 0.5x and 98.2..98.6% at 1x,
    # while the Model column lists 96.9..99.7% and 99.9..100%. No seed says how that column was made.
    rows = read_gsr_rows(GSR_TABLE_PATHS[0])
    half = {int(r["flows"]): r for r in rows if r["multiple"] == "0.5"}
    for n, printed in [(100, "78.0"), (200, "79.4"), (300, "79.0"), (400, "79.1")]:
        f7 = 100 * utilization_lower_bound(float(half[n]["buffer_packets"]), 1291, n)
        assert_printed(f7, printed)
        assert float(half[n]["model_pct"]) - f7 > 15
    one = [100 * utilization_lower_bound(float(r["buffer_packets"]), 1291, int(r["flows"])) for r in rows]
    one = [u for u, r in zip(one, rows, strict=True) if r["multiple"] == "1"]
    assert 98.15 <= min(one) and max(one) < 98.65


def test_gsr_buffers_are_the_sqrt_n_rule():
    # Pkts = multiple x 1291/sqrt(n) (F4), with the 1x value rounded down first (1291/sqrt(300) = 74.5 -> 74).
    for r in read_gsr_rows(GSR_TABLE_PATHS[0]):
        m, n = float(r["multiple"]), int(r["flows"])
        assert abs(int(r["buffer_packets"]) - m * 1291 / math.sqrt(n)) <= m + 0.5, r
        if m == 1:
            assert int(r["buffer_packets"]) == math.floor(1291 / math.sqrt(n))


# --- F2, F3, F19: the sawtooth ----------------------------------------------------------------------


def test_f19_fig4_period():
    # App. B: BDP = B = 142 packets at 1000 packets/s, T = 1.5 * 142^2/1000 = 30.2 s.
    t = queue_fill_time_s(142, 142, 1000)
    assert t == pytest.approx(1.5 * 142**2 / 1000)
    assert_printed(t, "30.2")
    assert sawtooth_period_s(142, 142, 1000) == pytest.approx(t)


def test_f19_window_and_queue_at_b_equal_bdp():
    for t in (0.0, 1.0, 10.0, 29.0):
        assert sawtooth_window_packets(t, 142, 142, 1000) == pytest.approx(math.sqrt(2 * 1000 * t + 142**2))
        assert sawtooth_queue_packets(t, 142, 142, 1000) == pytest.approx(math.sqrt(2000 * t + 142**2) - 142)
    period = sawtooth_period_s(142, 142, 1000)
    assert sawtooth_queue_packets(0.0, 142, 142, 1000) == 0.0  # touches zero once per loss
    assert sawtooth_queue_packets(period - 1e-9, 142, 142, 1000) == pytest.approx(142, abs=1e-3)
    # Periodic: one period later it is back at the start.
    assert sawtooth_window_packets(period + 3.0, 142, 142, 1000) == pytest.approx(
        sawtooth_window_packets(3.0, 142, 142, 1000)
    )


def test_sawtooth_under_and_over_buffered():
    # B < BDP: the window restarts at (BDP + B)/2, below BDP, so the queue is empty for a while.
    assert sawtooth_window_packets(0.0, 50, 142, 1000) == pytest.approx(96)
    assert sawtooth_queue_packets(1.0, 50, 142, 1000) == 0.0
    # It takes (142 - 96) RTTs of 0.142 s to reach BDP, then F19's fill time.
    assert sawtooth_period_s(50, 142, 1000) == pytest.approx(46 * 0.142 + queue_fill_time_s(50, 142, 1000))
    # B > BDP: the queue never empties; its minimum is (B - BDP)/2.
    assert sawtooth_queue_packets(0.0, 300, 142, 1000) == pytest.approx(79)
    period = sawtooth_period_s(300, 142, 1000)
    assert min(sawtooth_queue_packets(period * k / 200, 300, 142, 1000) for k in range(200)) == pytest.approx(79)


def test_in_phase_flows_only_rescale_time():
    for b in (0, 50, 142, 300):
        assert sawtooth_period_s(b, 142, 1000, flows=4) == pytest.approx(sawtooth_period_s(b, 142, 1000) / 4)
        assert sawtooth_window_packets(1.0, b, 142, 1000, flows=4) == pytest.approx(
            sawtooth_window_packets(4.0, b, 142, 1000)
        )


def test_single_flow_utilization():
    assert single_flow_utilization(0, 142) == pytest.approx(0.75)  # no buffer: the classic 3/4
    assert single_flow_utilization(142, 142) == 1.0
    assert single_flow_utilization(500, 142) == 1.0
    us = [single_flow_utilization(b, 142) for b in (0, 20, 50, 100, 141)]
    assert all(a < b for a, b in zip(us, us[1:], strict=False)) and us[-1] < 1


@pytest.mark.parametrize("buffer", [0, 20, 71, 120])
def test_single_flow_utilization_matches_the_integrated_sawtooth(buffer):
    # Independent of the closed form: the link carries min(W, BDP)/BDP of its rate; average over one cycle.
    bdp, rate = 142, 1000
    period = sawtooth_period_s(buffer, bdp, rate)
    steps = 20000
    carried = sum(
        min(sawtooth_window_packets((k + 0.5) * period / steps, buffer, bdp, rate), bdp) for k in range(steps)
    )
    assert carried / steps / bdp == pytest.approx(single_flow_utilization(buffer, bdp), abs=1e-6)


# --- F9-F14: short flows ---------------------------------------------------------------------------

SHORT_FLOW_TABLE = [  # section 0.1, rho = 0.8, IW = 2: l, bursts, E[X], E[X^2], E[Q], B(0.01), B(0.025), B(0.001)
    (2, [2], "2.00", "4.00", "3.20", "18.4", "14.8", "27.6"),
    (6, [2, 4], "3.00", "10.00", "5.47", "30.7", "24.6", "46.1"),
    (14, [2, 4, 8], "4.67", "28.00", "10.13", "55.3", "44.3", "82.9"),
    (16, [2, 4, 8, 2], "4.00", "22.00", "9.40", "50.7", "40.6", "76.0"),
    (30, [2, 4, 8, 16], "7.50", "85.00", "19.67", "104.4", "83.6", "156.6"),
    (62, [2, 4, 8, 16, 32], "12.40", "272.80", "39.04", "202.6", "162.3", "303.9"),
    (100, [2, 4, 8, 16, 32, 38], "16.67", "468.00", "49.49", "258.6", "207.2", "387.9"),
]


@pytest.mark.parametrize("row", SHORT_FLOW_TABLE, ids=lambda r: f"l={r[0]}")
def test_short_flow_table(row):
    length, bursts, e1, e2, eq, b01, b025, b001 = row
    assert slow_start_bursts(length) == bursts
    m = burst_moments(bursts)
    assert_printed(m.e1, e1)
    assert_printed(m.e2, e2)
    assert_printed(mean_queue_packets(0.8, m), eq)
    for p, printed in [(0.01, b01), (0.025, b025), (0.001, b001)]:
        assert_printed(buffer_for_overflow_probability(p, 0.8, m), printed)
        assert overflow_probability(buffer_for_overflow_probability(p, 0.8, m), 0.8, m) == pytest.approx(p)


def test_flows_of_14_packets_queue_more_than_flows_of_16():
    # The paper's claim; and the TR's "{2,4,8,4}" for 16 packets is a misprint for {2,4,8,2}.
    q14 = mean_queue_packets(0.8, burst_moments(slow_start_bursts(14)))
    q16 = mean_queue_packets(0.8, burst_moments(slow_start_bursts(16)))
    assert q14 > q16
    assert slow_start_bursts(16) != [2, 4, 8, 4]


def test_f10_corrected_form_is_in_packets():
    # Doubling every burst doubles the corrected mean queue; the TR's printed rho/(2(1-rho)) E[X^2]
    # would quadruple it (it is in packets^2), and for l = 14 it would give 56 packets, not 10.13.
    m = burst_moments([2, 4, 8])
    m2 = burst_moments([4, 8, 16])
    assert mean_queue_packets(0.8, m2) == pytest.approx(2 * mean_queue_packets(0.8, m))
    printed_tr = 0.8 / (2 * 0.2) * m.e2
    assert printed_tr == pytest.approx(56) and abs(printed_tr - mean_queue_packets(0.8, m)) > 40
    # With one-packet bursts it is the M/D/1 queue rho^2/(2(1 - rho)).
    for rho in (0.3, 0.5, 0.8, 0.95):
        assert mean_queue_packets(rho, BurstMoments(1, 1, 1)) == pytest.approx(rho**2 / (2 * (1 - rho)))


def test_seed_002_bursts_up_to_16_at_load_08():
    for bursts in ([2, 4, 8, 16], [2, 4, 8, 16, 16], [16]):
        m = burst_moments(bursts)
        # B(0.01%)/B(1%) = ln(10^4)/ln(10^2) = 2 exactly, whatever the bursts (230/115 = 2).
        ratio = buffer_for_overflow_probability(1e-4, 0.8, m) / buffer_for_overflow_probability(0.01, 0.8, m)
        assert ratio == pytest.approx(2.0, rel=1e-12)
    # B = 115 at rho = 0.8 implies E[X^2]/E[X] = 115 * 0.5/ln 100 = 12.49.
    assert_printed(115 * (2 * 0.2 / 0.8) / math.log(100), "12.49")
    m = burst_moments([2, 4, 8, 16])
    assert_printed(m.e2 / m.e1, "11.33")
    for bursts, printed in [([2, 4, 8, 16], "104.4"), ([2, 4, 8, 16, 16], "119.3"), ([16], "147.4")]:
        assert_printed(buffer_for_overflow_probability(0.01, 0.8, burst_moments(bursts)), printed)


def test_f14_md1():
    assert md1_kappa(0.8) == pytest.approx(0.5)
    assert_printed(md1_buffer_packets(0.01, 0.8), "9.2")


def test_third_order_and_exact_kappa():
    for length in (2, 6, 14, 16, 30, 62, 100):
        bursts = slow_start_bursts(length)
        m = burst_moments(bursts)
        k2, k3, exact = kappa_second_order(0.8, m), kappa_third_order(0.8, m), kappa_cramer(0.8, bursts)
        # exact solves nu (E[e^{kX}] - 1) = k with nu = rho/E[X] (F13).
        nu = 0.8 / m.e1
        assert nu * (sum(math.exp(exact * x) for x in bursts) / len(bursts) - 1) == pytest.approx(exact, rel=1e-9)
        # Each truncation drops positive terms, so exact <= 3rd order <= 2nd order, and 3rd is the closer.
        assert exact < k3 < k2
        assert abs(k3 - exact) < abs(k2 - exact)
        # k3 solves the cubic-truncated Cramer equation.
        assert m.e3 * k3**2 / 6 + m.e2 * k3 / 2 == pytest.approx(0.2 / 0.8 * m.e1)
    assert kappa_cramer(0.8, [1]) == pytest.approx(0.4308, abs=1e-4)  # M/D/1: 0.8 (e^k - 1) = k


def test_third_order_tail_round_trip():
    m = burst_moments([2, 4, 8])
    for p in (0.01, 0.025, 0.001):
        b = buffer_for_overflow_probability(p, 0.8, m, order=3)
        assert overflow_probability(b, 0.8, m, order=3) == pytest.approx(p)
        assert b > buffer_for_overflow_probability(p, 0.8, m)  # a slower decay needs more buffer here
    with pytest.raises(ValueError):
        overflow_probability(10, 0.8, m, order=4)


def test_initial_window_and_window_cap():
    assert slow_start_bursts(100, iw=10) == [10, 20, 40, 30]
    assert slow_start_bursts(14, iw=10) == [10, 4]
    assert slow_start_bursts(1) == [1]
    assert slow_start_bursts(100, max_window_packets=16) == [2, 4, 8, 16, 16, 16, 16, 16, 6]
    for iw in (1, 2, 3, 10):
        for length in range(1, 300):
            bursts = slow_start_bursts(length, iw)
            assert sum(bursts) == length and bursts[0] == min(iw, length)
    # Linux's IW 10 makes bigger bursts, so a bigger queue for the same flows.
    assert mean_queue_packets(0.8, burst_moments(slow_start_bursts(14, 10))) > mean_queue_packets(
        0.8, burst_moments(slow_start_bursts(14))
    )
    with pytest.raises(ValueError):
        slow_start_bursts(0)


def test_flow_mix_moments_weights_by_bursts():
    # Half the flows 2 packets ({2}), half 14 ({2,4,8}): the queue sees the bursts 2, 2, 4, 8 equally often.
    assert flow_mix_moments([(2, 0.5), (14, 0.5)]) == pytest.approx(burst_moments([2, 2, 4, 8]))
    assert flow_mix_moments([(30, 1.0)]) == pytest.approx(burst_moments([2, 4, 8, 16]))
    assert flow_mix_moments([(14, 3.0)], iw=10) == pytest.approx(burst_moments([10, 4]))
    with pytest.raises(ValueError):
        flow_mix_moments([(14, 0.0)])


@pytest.mark.parametrize("load", [0.0, 1.0, 1.2, -0.1])
def test_load_outside_0_1_is_refused(load):
    with pytest.raises(ValueError):
        mean_queue_packets(load, burst_moments([2]))
    with pytest.raises(ValueError):
        kappa_second_order(load, burst_moments([2]))


# --- F21: M/M/1 ----------------------------------------------------------------------------------


def test_f21_mm1_slide_numbers():
    assert mm1_mean_packets(0.5) == pytest.approx(1)
    assert mm1_mean_packets(0.75) == pytest.approx(3)
    assert mm1_tail_probability(11, 0.5) < 1e-3  # P[X > 10] = P[X >= 11]
    assert mm1_tail_probability(11, 0.75) < 0.06
    assert mm1_tail_probability(10, 0.5) == pytest.approx(0.5**10)


# --- F15-F17: loss ---------------------------------------------------------------------------------


def test_f16_seed_001_numbers():
    # Section 2.3: N = 200, C Tp = 250 packets.
    for b, printed in [(18, "42.2"), (250, "12.1"), (500, "5.4")]:
        assert_printed(100 * loss_rate_persistent(200, 250, b), printed)


def test_f16_is_f15_solved_for_the_loss_rate():
    # Each of N flows gets C/N at RTT = Tp + B/C (Tp round-trip).
    rate_pps, tp, flows = 50e6 / 12000, 0.060, 200
    for b in (18, 250, 500):
        p = loss_rate_persistent(flows, rate_pps * tp, b)
        assert mathis_throughput_pps(tp + b / rate_pps, p) == pytest.approx(rate_pps / flows)


def test_f17_morris_halving_the_window_quadruples_loss():
    assert morris_loss(10) == pytest.approx(0.0076)
    # Sum of windows = BDP + B: going from B = BDP to B = 0 halves w.
    bdp, flows = 1000, 100
    assert morris_loss(bdp / flows) / morris_loss((bdp + bdp) / flows) == pytest.approx(4)


# --- predict and the report -----------------------------------------------------------------------


def test_predict_defaults_evaluate_both_rules():
    p = predict(100, 62.5, 87)
    assert_printed(p.bdp_packets, "453.1")
    assert_printed(p.stanford_packets, "45.3")
    assert [b.buffer_packets for b in p.buffers] == pytest.approx([p.stanford_packets, p.bdp_packets])
    sqrt_n, full = p.buffers
    assert sqrt_n.stanford_multiple == pytest.approx(1) and full.bdp_multiple == pytest.approx(1)
    assert_printed(100 * sqrt_n.utilization_lower_bound, "98.182")
    assert full.in_phase_utilization == 1.0 and sqrt_n.in_phase_utilization < 0.9
    assert_printed(full.max_queueing_delay_ms, "87.00")
    assert sqrt_n.short_flow_overflow_probability is None and p.short_flows is None


def test_predict_fig4_single_flow():
    # 12 Mb/s of 1500-byte packets is 1000 packets/s; RTT 142 ms gives BDP 142.
    p = predict(1, 12, 142, buffer_packets=142)
    assert p.rate_pps == pytest.approx(1000) and p.bdp_packets == pytest.approx(142)
    assert_printed(p.buffers[0].in_phase_period_s, "30.2")


def test_predict_seed_001_and_short_flows():
    p = predict(200, 50, 60, buffer_packets=[18, 250, 500], load=0.8, short_flow_packets=14)
    assert [round(100 * b.loss_rate_persistent, 1) for b in p.buffers] == [42.2, 12.1, 5.4]
    s = p.short_flows
    assert s is not None and s.bursts == [2, 4, 8]
    assert_printed(s.mean_queue_packets, "10.13")
    assert_printed(s.buffer_for_probability[0.01], "55.3")
    assert_printed(s.md1_buffer_packets, "9.2")
    probs = [b.short_flow_overflow_probability for b in p.buffers]
    assert probs[0] == pytest.approx(math.exp(-18 / 12)) and probs[0] > probs[1] > probs[2]
    # RTT lists use the harmonic mean (F20).
    assert predict(10, 50, [30, 530]).rtt_ms == pytest.approx(2 / (1 / 30 + 1 / 530))


def test_report_names_units_and_formulas():
    text = format_report(predict(100, 62.5, 87, buffer_packets=[45.3, 453.1], load=0.8))
    for needle in ("F1", "F4", "F6", "F7", "F10", "F11", "F14", "F16", "F17", "F19", "packets", " ms", " %"):
        assert needle in text, needle
    assert text.count("\nbuffer ") == 2
    assert "98.18 %" in text  # F7 at 1x RTT*C/sqrt(n), n = 100
    assert "bursts {2, 4, 8}" in text
    assert "harmonic mean" in format_report(predict(10, 50, [30, 530]))


def test_to_dict_is_json():
    d = json.loads(json.dumps(predict(100, 62.5, 87, load=0.5).to_dict()))
    assert d["flows"] == 100 and len(d["buffers"]) == 2
    assert set(d["short_flows"]["buffer_for_probability"]) == {"0.01", "0.025", "0.001"}


# --- the `model` subcommand ----------------------------------------------------------------------


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bufsize")
    sub = p.add_subparsers(dest="cmd", required=True)
    model_cli.add_parser(sub)
    return p.parse_args(["model", *argv])


def test_cli_report(capsys):
    a = parse("--flows", "100")
    assert a.func is model_cli.run
    assert model_cli.run(a) == 0
    out = capsys.readouterr().out
    assert "453.1 packets" in out and "45.3 packets" in out and "F7" in out


def test_cli_json_buffers_repeatable_and_comma_lists(capsys):
    a = parse(*"--flows 200 --rate-mbps 50 --rtt-ms 60 --buffer-packets 18,250 --buffer-packets 500 --json".split())
    assert model_cli.run(a) == 0
    d = json.loads(capsys.readouterr().out)
    assert [b["buffer_packets"] for b in d["buffers"]] == [18, 250, 500]
    assert round(100 * d["buffers"][0]["loss_rate_persistent"], 1) == 42.2
    assert d["short_flows"] is None


def test_cli_short_flows_with_linux_initial_window(capsys):
    assert model_cli.run(parse("--flows", "10", "--load", "0.8", "--iw", "10", "--flow-packets", "100", "--json")) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["short_flows"]["bursts"] == [10, 20, 40, 30]


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--flows", "0"], "--flows 0"),
        (["--flows", "-3"], "--flows -3"),
        (["--flows", "1", "--rate-mbps", "0"], "--rate-mbps 0"),
        (["--flows", "1", "--rate-mbps", "-5"], "--rate-mbps -5"),
        (["--flows", "1", "--rtt-ms", "0"], "--rtt-ms 0"),
        (["--flows", "1", "--rtt-ms", "abc"], "--rtt-ms abc"),
        (["--flows", "1", "--buffer-packets", "-1"], "--buffer-packets -1"),
        (["--flows", "1", "--buffer-packets", "10,x"], "--buffer-packets 10,x"),
        (["--flows", "1", "--load", "0"], "--load 0"),
        (["--flows", "1", "--load", "1"], "--load 1"),
        (["--flows", "1", "--load", "1.5"], "--load 1.5"),
        (["--flows", "1", "--iw", "0"], "--iw 0"),
        (["--flows", "1", "--packet-bytes", "0"], "--packet-bytes 0"),
        (["--flows", "1", "--flow-packets", "0"], "--flow-packets 0"),
    ],
)
def test_cli_bad_input_is_a_one_line_usage_error(argv, needle, capsys):
    with pytest.raises(UsageError) as e:
        model_cli.run(parse(*argv))
    msg = str(e.value)
    assert msg.startswith(needle) and "\n" not in msg
    assert e.value.exit_status == 2
    assert capsys.readouterr().out == ""  # nothing printed before refusing


def test_cli_flows_is_required():
    with pytest.raises(SystemExit):
        parse("--rate-mbps", "10")
