"""The buffer rules for CUBIC, BIC and BBR beside Reno's (bufsize/theory/ccrules.py), against values
worked by hand, and `bufsize model --cc`."""

from __future__ import annotations

import argparse
import json
import math
import random

import pytest

from bufsize.cli import theory as model_cli
from bufsize.theory.ccrules import rule_for, utilization_bound, window_deviation
from bufsize.theory.model import predict, utilization_lower_bound

BDP = 453.125  # 62.5 Mb/s x 87 ms in 1500-byte packets


def test_single_flow_rules_by_hand() -> None:
    # beta (BDP + B) = BDP: B = BDP (1 - beta)/beta
    assert rule_for("reno").single_flow_packets(BDP) == pytest.approx(BDP)
    assert rule_for("cubic").single_flow_packets(BDP) == pytest.approx(BDP * 0.3 / 0.7)  # 194.2
    assert rule_for("cubic").single_flow_packets(BDP) == pytest.approx(194.196, abs=0.001)
    assert rule_for("bic").single_flow_packets(BDP) == pytest.approx(BDP / 4)
    assert rule_for("bbr").single_flow_packets(BDP) == pytest.approx(113.28, abs=0.01)  # the 1.25 phase's queue


def test_window_deviations_by_hand() -> None:
    # Reno: uniform on [W/2, W], mean 3W/4, sd (W/2)/sqrt(12): 1/(3 sqrt 3) of the mean (Appenzeller 2004's F6)
    assert window_deviation("reno") == pytest.approx(0.19245, abs=1e-5)
    # BIC's straight sawtooth from 0.8 W: (0.2 W/sqrt 12)/(0.9 W) = 0.064150, a third of Reno's
    assert window_deviation("bic") == pytest.approx(0.064150, abs=1e-6)
    assert rule_for("bic").many_flows_factor == pytest.approx(1 / 3)
    # CUBIC: W (1 - 0.3 u^3), u uniform: mean 0.925 W, sd 0.3 sqrt(1/7 - 1/16) W = 0.085042 W
    assert window_deviation("cubic") == pytest.approx(0.085042 / 0.925, abs=1e-5)
    assert rule_for("cubic").many_flows_factor == pytest.approx(0.47772, abs=1e-4)


def test_cubic_deviation_matches_its_window_sampled_in_time() -> None:
    """The closed form against CUBIC's window W - C (K - t)^3 sampled at uniform times over one cycle."""
    rng = random.Random(1)
    w, beta, c = 100.0, 0.7, 0.4
    k = math.cbrt(w * (1 - beta) / c)
    xs = [w - c * (k - rng.uniform(0, k)) ** 3 for _ in range(200_000)]
    mean = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))
    assert sd / mean == pytest.approx(window_deviation("cubic"), rel=0.01)


def test_n_flow_rules_and_reno_is_seed_000() -> None:
    assert rule_for("reno").packets(BDP, 10) == pytest.approx(BDP / math.sqrt(10))
    assert rule_for("cubic").packets(BDP, 100) == pytest.approx(0.47772 * BDP / 10, rel=1e-4)
    assert rule_for("bbr").packets(BDP, 4) == pytest.approx(BDP / 8)
    assert rule_for("cubic").packets(BDP, 1) == rule_for("cubic").single_flow_packets(BDP)
    for b, n in ((143.3, 10), (20.0, 100), (453.0, 2)):
        assert utilization_bound("reno", b, BDP, n) == pytest.approx(utilization_lower_bound(b, BDP, n))
        # a smaller deviation covers the same buffer with more to spare
        assert utilization_bound("cubic", b, BDP, n) > utilization_lower_bound(b, BDP, n)
    with pytest.raises(ValueError, match="no buffer rule"):
        rule_for("vegas")
    with pytest.raises(ValueError):
        rule_for("cubic").packets(BDP, 0)


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    model_cli.add_parser(p.add_subparsers())
    return p.parse_args(["model", *argv])


def test_model_command_adds_the_rule_of_the_cc(capsys: pytest.CaptureFixture[str]) -> None:
    assert model_cli.run(parse("--flows", "10", "--cc", "cubic")) == 0
    out = capsys.readouterr().out
    assert "cubic rule, 10 flows" in out and "68.5 packets" in out and "our derivation" in out
    assert "Updating the Theory of Buffer Sizing" in out
    assert model_cli.run(parse("--flows", "10", "--cc", "cubic", "--json")) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["cc"] == "cubic" and d["cc_rule_packets"] == pytest.approx(0.47772 * BDP / math.sqrt(10), rel=1e-4)
    # the cubic rule is evaluated as a buffer of its own, with its bound beside F7
    first = d["buffers"][0]
    assert first["buffer_packets"] == pytest.approx(d["cc_rule_packets"])
    assert first["cc_utilization_bound"] > first["utilization_lower_bound"]
    # Reno: Appenzeller 2004's two rules only, as before
    assert [b["buffer_packets"] for b in predict(10, 62.5, 87).to_dict()["buffers"]] == pytest.approx(
        [BDP / math.sqrt(10), BDP]
    )
    with pytest.raises(SystemExit):
        parse("--flows", "10", "--cc", "vegas")
