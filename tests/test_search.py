"""The search logic against a simulated link: noisy, monotone in buffer, with a known threshold."""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import replace

import pytest

from bufsize.longlived import crossing
from bufsize.longlived.crossing import Crossing, estimate, rms_sd, robust_sd, t_quantile
from bufsize.longlived.median_search import MedianSearch, sign_test
from bufsize.longlived.simlink import MODELS, LinkModel
from bufsize.longlived.simlink import SimLink as ModelLink
from bufsize.topologies import FRAME_BYTES


class SimLink:
    """Utilization 1 - 0.2 * exp(-B / scale), plus noise; optional outliers. Threshold is analytic."""

    def __init__(self, scale: float, noise: float = 0.001, outlier_every: int = 0, seed: int = 1) -> None:
        self.scale, self.noise, self.outlier_every = scale, noise, outlier_every
        self.rng = random.Random(seed)
        self.calls = 0

    def true_util(self, packets: float) -> float:
        return 1 - 0.2 * math.exp(-packets / self.scale)

    def threshold(self, target: float) -> int:
        """Smallest whole number of packets whose noiseless utilization reaches the target."""
        return max(1, math.ceil(-self.scale * math.log((1 - target) / 0.2)))

    def __call__(self, buffer_bytes: int, n: int) -> list[float]:
        packets = buffer_bytes / FRAME_BYTES
        out = []
        for _ in range(n):
            self.calls += 1
            v = self.true_util(packets) + self.rng.gauss(0, self.noise)
            if self.outlier_every and self.calls % self.outlier_every == 0:
                v = 0.5  # a wild sample, e.g. a flow restarting
            out.append(v)
        return out


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("scale", [3.0, 40.0, 120.0])
def test_converges_to_the_true_threshold(seed, scale):
    noise = 0.0002
    link = SimLink(scale, noise=noise, seed=seed)
    res = MedianSearch(link, target=0.99, hi_packets=1000).run()
    # Near the threshold utilization climbs (1 - target) / scale per packet; the median of 5 samples
    # has a spread of about noise / sqrt(5), so the answer can be off by that many packets.
    slope = (1 - 0.99) / scale
    tol = max(1, math.ceil(4 * noise / math.sqrt(5) / slope))
    assert abs(res.buffer_packets - link.threshold(0.99)) <= tol, (res.buffer_packets, link.threshold(0.99), tol)
    assert res.converged, res.note
    assert res.buffer_bytes == res.buffer_packets * FRAME_BYTES


def test_can_answer_one_packet():
    link = SimLink(0.1, noise=0.0005)  # even one packet keeps the link busy
    res = MedianSearch(link, target=0.99, hi_packets=449).run()
    assert res.buffer_packets == 1
    assert any(p.buffer_packets == 1 and p.passed for p in res.probes)


def test_single_outlier_sample_does_not_flip_a_decision():
    clean = MedianSearch(SimLink(40.0, noise=0.0), target=0.99, hi_packets=500).run()
    noisy = MedianSearch(SimLink(40.0, noise=0.0, outlier_every=5), target=0.99, hi_packets=500).run()
    assert noisy.buffer_packets == clean.buffer_packets
    assert any(min(p.samples) == 0.5 for p in noisy.probes), "the simulated outliers were never drawn"


def test_probes_near_the_boundary_are_extended_and_recorded():
    link = SimLink(40.0, noise=0.002)
    res = MedianSearch(link, target=0.99, hi_packets=500, samples=5, extra_samples=10).run()
    near = [p for p in res.probes if p.extended]
    assert near and all(len(p.samples) == 15 for p in near)
    assert all(len(p.samples) == 5 for p in res.probes if not p.extended)
    # The answer is consistent with what was recorded: it passed, the packet below failed.
    assert any(p.buffer_packets == res.buffer_packets and p.passed for p in res.probes)
    below = [p for p in res.probes if p.buffer_packets == res.buffer_packets - 1]
    assert below and not below[-1].passed


def test_one_wrong_probe_is_caught_by_the_final_recheck():
    link = SimLink(40.0, noise=0.0)
    truth = link.threshold(0.99)
    lied = {"done": False}

    def measure(buffer_bytes: int, n: int) -> list[float]:
        # The first probe just below the threshold comes out entirely wrong (all samples high).
        if buffer_bytes // FRAME_BYTES == truth - 1 and not lied["done"]:
            lied["done"] = True
            return [0.999] * n
        return link(buffer_bytes, n)

    res = MedianSearch(measure, target=0.99, hi_packets=500, first_guess_packets=truth - 1).run()
    assert lied["done"]
    assert res.buffer_packets == truth
    assert any(p.recheck for p in res.probes)


def test_a_top_that_fails_its_recheck_is_not_answered_as_converged():
    # Relative to a reference taken at the top, the top passes by definition, until a re-check there
    # reads below the target (the link slowed since calibration): then no buffer is confirmed.
    def measure(buffer_bytes: int, n: int) -> list[float]:
        return [0.95] * n

    res = MedianSearch(measure, target=0.99, hi_packets=100, assume_hi_passes=True, first_guess_packets=18).run()
    assert res.buffer_packets == 100 and not res.converged
    assert "top of the search range" in res.note
    assert [p.buffer_packets for p in res.probes if p.recheck] == [100]


def test_passes_overturned_by_rechecks_move_the_answer_up():
    # 50 and 60 each pass once, then fail for good; the threshold is really 61. Each re-check that
    # overturns a pass resumes the search above it, and the answer is a buffer that passed last.
    seen: dict[int, int] = {}

    def measure(buffer_bytes: int, n: int) -> list[float]:
        b = buffer_bytes // FRAME_BYTES
        seen[b] = seen.get(b, 0) + 1
        if b == 50:
            return [1.0 if seen[b] == 1 else 0.9] * n
        if b == 60:
            return [1.0 if seen[b] == 1 else 0.9] * n
        return [1.0 if b >= 61 else 0.9] * n

    res = MedianSearch(measure, target=0.99, hi_packets=100, assume_hi_passes=True, first_guess_packets=60).run()
    last = {p.buffer_packets: p.passed for p in res.probes}
    assert last[res.buffer_packets], [(p.buffer_packets, p.passed) for p in res.probes]
    assert res.buffer_packets == 61 and seen[50] == 2 and seen[60] == 2


def test_target_missed_even_at_the_top_is_reported_not_looped():
    link = SimLink(1000.0, noise=0.0)
    res = MedianSearch(link, target=0.999, hi_packets=10).run()
    assert not res.converged and "above the search range" in res.note
    assert len(res.probes) == 1


@pytest.mark.parametrize("resolution", [0.05, 0.2])
def test_resolution_stops_early_but_brackets_the_threshold(resolution):
    link = SimLink(40.0, noise=0.0)
    exact = MedianSearch(SimLink(40.0, noise=0.0), target=0.99, hi_packets=1000).run()
    res = MedianSearch(link, target=0.99, hi_packets=1000, resolution=resolution).run()
    truth = link.threshold(0.99)
    # Noiseless: the answer passes, so it is at or above the threshold, and within the resolution.
    assert truth <= res.buffer_packets <= truth + max(1, resolution * res.buffer_packets)
    assert len(res.probes) < len(exact.probes)


def test_assume_hi_passes_skips_the_top_probe():
    link = SimLink(40.0, noise=0.0)
    res = MedianSearch(link, target=0.99, hi_packets=898, assume_hi_passes=True).run()
    assert all(p.buffer_packets != 898 for p in res.probes)
    assert res.buffer_packets == link.threshold(0.99)


def test_a_link_whose_verdicts_keep_flipping_is_reported_too_noisy():
    calls = {"n": 0}

    def measure(buffer_bytes: int, n: int) -> list[float]:
        packets = buffer_bytes // FRAME_BYTES
        calls["n"] += 1
        if packets < 20:
            return [0.9] * n
        if packets >= 80:
            return [1.0] * n
        return [1.0 if calls["n"] % 2 else 0.9] * n  # between 20 and 80 packets: a coin toss

    res = MedianSearch(measure, target=0.99, hi_packets=500, rechecks=3).run()
    assert 20 <= res.buffer_packets <= 80
    if not res.converged:
        assert "too noisy" in res.note
    # Either way the re-checks ran and were recorded.
    assert sum(p.recheck for p in res.probes) >= 2


def test_an_answer_whose_own_verdict_is_unsettled_widens_the_interval_to_the_next_pass():
    """Like the Reno sweep's N=200: 1 packet fails every sample, 3 and up pass every sample, and 2
    packets reads as often above the target as below (its median sits on the target, so it passes)."""
    calls = {"n": 0}

    def measure(buffer_bytes: int, n: int) -> list[float]:
        packets = buffer_bytes // FRAME_BYTES
        if packets <= 1:
            return [0.9] * n
        if packets >= 3:
            return [1.0] * n
        out = []
        for _ in range(n):
            calls["n"] += 1
            out.append(1.0 if calls["n"] % 2 else 0.98)
        return out

    res = MedianSearch(measure, target=0.99, hi_packets=32, samples=5, sequential=True, max_samples=20).run()
    assert res.buffer_packets == 2
    # 2 is not settled either way, so the next buffer probed above it that passed could be the
    # answer (bisection from 32 probed 16, 8, 4, 2, 1): the interval reaches it.
    next_pass = min(p.buffer_packets for p in res.probes if p.passed and p.buffer_packets > 2)
    assert next_pass == 4
    assert res.uncertain_interval_packets == (2, next_pass)


def test_a_settled_answer_keeps_a_tight_interval():
    link = SimLink(20.0, noise=0.0)
    res = MedianSearch(link, target=0.99, hi_packets=200, samples=5, sequential=True, max_samples=20).run()
    assert res.uncertain_interval_packets == (res.buffer_packets, res.buffer_packets)


def test_sign_test_p_values():
    assert sign_test([1.0] * 5, 0.99) == pytest.approx(1 / 32)
    assert sign_test([0.9] * 5, 0.99) == pytest.approx(-1 / 32)
    assert sign_test([1.0, 0.9], 0.99) == 1.0  # balanced: no evidence either way
    assert sign_test([1.0, 1.0, 1.0, 0.9], 0.99) == pytest.approx(5 / 16)  # P(X >= 3 of 4)
    assert sign_test([0.99, 0.99], 0.99) == 1.0  # ties carry no evidence


class RealisticLink(SimLink):
    """Noise modelled on the committed quick run's samples (results/quick/2026-11-21-202721/*/samples.csv):
    per-sample sd of 1 to 3 points of utilization near the answer, and now and then a collapse (a
    sample at 54 % among 99 % ones at N=800): here sd 1.5 points and 5 % of samples uniform in 55..95 %."""

    def __init__(self, scale: float, seed: int) -> None:
        super().__init__(scale, noise=0.015, seed=seed)

    def __call__(self, buffer_bytes: int, n: int) -> list[float]:
        packets = buffer_bytes / FRAME_BYTES
        out = []
        for _ in range(n):
            self.calls += 1
            if self.rng.random() < 0.05:
                out.append(self.rng.uniform(0.55, 0.95))
            else:
                out.append(min(1.003, self.true_util(packets) + self.rng.gauss(0, self.noise)))
        return out


def spread_of_answers(scale: float, seeds: int, **kw) -> tuple[float, int, list]:
    answers, inside, intervals = [], 0, []
    for seed in range(seeds):
        link = RealisticLink(scale, seed)
        res = MedianSearch(link, target=0.99, hi_packets=int(10 * scale), assume_hi_passes=True, resolution=0.05,
                           **kw).run()  # fmt: skip
        lo, hi = res.uncertain_interval_packets
        assert lo <= res.buffer_packets <= hi, (lo, res.buffer_packets, hi)
        answers.append(res.buffer_packets)
        inside += lo <= link.threshold(0.99) <= hi
        intervals.append((lo, hi))
    return statistics.stdev(answers) / statistics.mean(answers), inside, intervals


def test_sequential_sign_test_makes_answers_repeatable_under_realistic_noise():
    """Three fixed samples per probe (the quick preset) spread answers as widely as the 2012 runs did
    (measured here: 28 %); the sequential test (5 to 20 samples) keeps the coefficient of variation
    near 10 % (measured: 9.7 %)."""
    cv_fixed, _, _ = spread_of_answers(20.0, 30, samples=3)
    cv_seq, inside, intervals = spread_of_answers(20.0, 30, samples=5, sequential=True, max_samples=20)
    assert cv_fixed > 0.2, cv_fixed
    assert cv_seq < 0.12 and cv_seq < cv_fixed / 2, (cv_seq, cv_fixed)
    # The uncertain span holds the true threshold (60 packets) in most runs: 28 of 30 measured.
    assert inside >= 25, (inside, intervals)
    assert statistics.median(hi - lo for lo, hi in intervals) < 60, intervals


def test_sequential_probe_stops_early_when_the_verdict_is_clear():
    link = SimLink(20.0, noise=0.001)
    res = MedianSearch(link, target=0.99, hi_packets=200, samples=5, sequential=True, max_samples=20).run()
    far = [p for p in res.probes if abs(link.true_util(p.buffer_packets) - 0.99) > 0.003]  # beyond the margin
    assert far and all(len(p.samples) == 5 for p in far)  # 5 of 5 on one side: p = 1/32 < alpha
    assert max(len(p.samples) for p in res.probes) <= 20


def test_theory_uses_the_mean_rtt_as_seed_000_does():
    from bufsize.longlived.search import theory
    from bufsize.topologies.config import DumbbellConfig

    spread = theory(DumbbellConfig(hosts=3, rtt_ms=[80.0, 100.0, 120.0]), 100)
    # 155 Mb/s would give the GSR's 1291; at 62.5 Mb/s and a mean of 100 ms the pipe is 516 frames.
    assert spread["rtt_ms_for_theory"] == 100.0 and spread["rtt_ms_largest"] == 120.0
    assert spread["bdp_packets"] == pytest.approx(62.5e6 / 8 * 0.1 / FRAME_BYTES, abs=0.1)
    assert spread["theory_sqrt_n_packets"] == pytest.approx(spread["bdp_packets"] / 10, abs=0.1)
    same = theory(DumbbellConfig(hosts=2, rtt_ms=[87.0, 87.0]), 10)
    assert same["bdp_packets"] == pytest.approx(448.9, abs=0.1)


# ---- the precision rule (crossing.py, MedianSearch.precision) -----------------------------------


def precision_search(model: LinkModel, link: ModelLink, **kw) -> MedianSearch:
    return MedianSearch(link, target=model.target, hi_packets=model.hi_packets, samples=3,
                        first_guess_packets=model.first_guess, assume_hi_passes=True, precision=0.1, **kw)  # fmt: skip


def sign_test_search(model: LinkModel, link: ModelLink) -> MedianSearch:
    """The full and theory presets' rule (presets.SEQUENTIAL)."""
    return MedianSearch(link, target=model.target, hi_packets=model.hi_packets, samples=5,
                        first_guess_packets=model.first_guess, assume_hi_passes=True, resolution=0.05,
                        sequential=True, max_samples=20)  # fmt: skip


def test_crossing_of_a_noiseless_line_is_exact_and_its_interval_narrow() -> None:
    # utilization = 0.99 + 0.02 ln(b / 40): crosses 0.99 at exactly 40 packets
    def u(b: float) -> float:
        return 0.99 + 0.02 * math.log(b / 40)

    samples = {b: [u(b) + e for e in (-1e-5, 0.0, 1e-5)] for b in (30, 36, 44, 52)}
    c = estimate(samples, 0.99)
    assert c is not None and c.packets == pytest.approx(40, rel=1e-3)
    assert c.bracket == (36, 44) and c.local
    assert c.low < 40 < c.high and c.half_width() < 0.01
    assert c.slope == pytest.approx(0.02, rel=1e-3)


def test_crossing_interval_widens_with_the_noise_and_is_unbounded_when_the_curve_does_not_rise() -> None:
    rng = random.Random(3)

    def draw(noise: float) -> dict[int, list[float]]:
        return {b: [0.99 + 0.02 * math.log(b / 40) + rng.gauss(0, noise) for _ in range(6)] for b in (32, 38, 42, 50)}

    quiet, loud = estimate(draw(0.0005), 0.99), estimate(draw(0.004), 0.99)
    assert quiet is not None and loud is not None
    assert quiet.half_width() < loud.half_width()
    # One failing buffer below one passing one, and a third that falls again: no rise, no interval.
    flat = {38: [0.989, 0.9885, 0.9895], 42: [0.9905, 0.991, 0.9902], 44: [0.985, 0.986, 0.9845]}
    c = estimate(flat, 0.99)
    assert c is not None and c.low == 0 and c.high == math.inf
    # All pass (or all fail): no crossing yet.
    assert estimate({10: [0.995] * 3, 20: [0.999] * 3}, 0.99) is None
    assert estimate({10: [0.95] * 3, 20: [0.98] * 3}, 0.99) is None


def test_noise_estimate_is_the_sd_for_normal_samples_and_ignores_a_tenth_of_wild_ones() -> None:
    rng = random.Random(5)
    normal = [[rng.gauss(0.99, 0.004) for _ in range(3)] for _ in range(200)]
    sd, dof = robust_sd(normal)
    assert sd == pytest.approx(0.004, rel=0.1) and dof == 400
    # One sample in 40 reads 10 points low (a flow in a timeout): the root mean square more than
    # doubles, the trimmed estimate moves by less than a fifth.
    wild = [[v - 0.1 if rng.random() < 1 / 40 else v for v in g] for g in normal]
    assert rms_sd(wild)[0] > 2 * 0.004
    assert robust_sd(wild)[0] == pytest.approx(sd, rel=0.2)
    assert robust_sd([[0.99]]) == (math.inf, 0)


def test_precision_rule_converges_under_a_heavy_one_sided_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    """The committed N = 10 samples' shape: a normal core and one sample in 25 reading 7 points low.
    With the full root mean square as the noise 69 of 100 such searches ran to their budget
    unconverged, with the trimmed estimate 9; over these 20 seeds at most 5 may, and the answers'
    median is within 10 % of the truth."""
    model = replace(MODELS["n10"], noise=0.006, outlier_every=25, outlier_drop=0.07)

    def searches() -> tuple[list[int], int]:
        answers, unconverged = [], 0
        for seed in range(20):
            res = precision_search(model, ModelLink(model, seed)).run()
            answers.append(res.buffer_packets)
            unconverged += not res.converged
        return answers, unconverged

    answers, unconverged = searches()
    assert unconverged <= 5, unconverged
    assert abs(statistics.median(answers) / ModelLink(model).answer() - 1) <= 0.1, answers
    monkeypatch.setattr(crossing, "NOISE_ESTIMATE", rms_sd)
    assert searches()[1] >= unconverged + 5  # the tail is what the trimming is for


def test_a_looser_precision_converges_with_fewer_samples() -> None:
    """At precision 0.2 the probes near the crossing stay inside the fit's window (FINE_STEP): before
    that cap, 3 in 4 simulated N = 100 searches ran to their budget. Over 10 seeds every search
    converges, within 20 % of the truth, on no more samples in all than at precision 0.1."""
    model = MODELS["n100"]
    loose, tight = [], []
    for seed in range(10):
        link = ModelLink(model, seed)
        res = MedianSearch(link, target=model.target, hi_packets=model.hi_packets, samples=3, precision=0.2,
                           first_guess_packets=model.first_guess, assume_hi_passes=True).run()  # fmt: skip
        assert res.converged, res.note
        assert abs(res.buffer_packets / link.answer() - 1) <= 0.2, res.buffer_packets
        loose.append(link.samples)
        other = ModelLink(model, seed)
        precision_search(model, other).run()
        tight.append(other.samples)
    assert sum(loose) <= sum(tight), (loose, tight)


def test_t_quantile_matches_the_table() -> None:
    for p, dof, table in ((0.95, 6, 1.943), (0.95, 20, 1.725), (0.9, 6, 1.440), (0.975, 10, 2.228)):
        assert t_quantile(p, dof) == pytest.approx(table, rel=0.01)


@pytest.mark.parametrize("name", ["n2", "n10", "n100", "n400"])
def test_precision_rule_answers_like_the_sign_test_with_far_fewer_samples(name: str) -> None:
    """On links with the committed searches' curves and noise, over 20 seeds: the answers' median is
    within 10 % of the true one and their CV at most 10 %; the 90 % interval covers the true crossing
    in at least 80 % of the searches; and the median search takes at most 60 % of the samples the
    presets' sign test takes on the same links (it took 28-39 %: bench/results/search-rule-offline.md)."""
    model = MODELS[name]
    answers, covered, samples_new, samples_old = [], 0, [], []
    for seed in range(20):
        link = ModelLink(model, seed)
        res = precision_search(model, link).run()
        answers.append(res.buffer_packets)
        lo, hi = res.uncertain_interval_packets or (0, 0)
        covered += lo <= model.crossing <= hi
        samples_new.append(link.samples)
        # Before stopping, the two buffers around the crossing were each sampled at least twice over.
        if res.converged and res.crossing is not None:
            for b in res.crossing.bracket:
                assert sum(len(p.samples) for p in res.probes if p.buffer_packets == b) >= 6, (b, res.probes)
        old = ModelLink(model, seed)
        sign_test_search(model, old).run()
        samples_old.append(old.samples)
    truth = ModelLink(model).answer()
    assert abs(statistics.median(answers) / truth - 1) <= 0.1, (answers, truth)
    assert statistics.pstdev(answers) / statistics.mean(answers) <= 0.1, answers
    assert covered >= 16, covered
    assert statistics.median(samples_new) <= 0.6 * statistics.median(samples_old), (samples_new, samples_old)


def test_precision_rule_never_calls_a_curve_flatter_than_its_noise_precise() -> None:
    """Utilization within one sample's noise of the target from 25 to 190 packets: most searches give
    up at their budget, unconverged, and saying why. Each look at the fit is a new chance of a
    spuriously narrow interval, so a few stop early; those answer a buffer whose true utilization is
    within half a sample's noise of the target, where no search can tell them from the truth."""
    model = MODELS["flat"]
    converged = 0
    for seed in range(20):
        link = ModelLink(model, seed)
        res = precision_search(model, link).run()
        assert link.samples <= 40 * 3 + 3, link.samples  # the budget, plus the probe that crossed it
        if res.converged:
            converged += 1
            off = abs(link.utilization(res.buffer_packets) - model.target)
            assert off <= model.noise / 2, (seed, res.buffer_packets, off, res.note)
        else:
            assert "not within" in res.note or "no crossing" in res.note, res.note
    assert converged <= 6, converged


def test_precision_rule_is_not_moved_by_a_wild_sample() -> None:
    model = MODELS["n100"]
    clean = precision_search(model, ModelLink(model, 4)).run()

    class Wild(ModelLink):
        def __call__(self, buffer_bytes: int, n: int) -> list[float]:
            out = super().__call__(buffer_bytes, n)
            if self.samples == n + 3:  # the second probe (after the first guess) has a sample of a link half idle
                out[0] = 0.5
            return out

    wild = precision_search(model, Wild(model, 4)).run()
    assert any(min(p.samples) == 0.5 for p in wild.probes)
    assert abs(wild.buffer_packets - clean.buffer_packets) <= 1, (wild.note, clean.note)


def test_precision_rule_answer_is_the_whole_packet_above_the_crossing_within_its_interval() -> None:
    model = MODELS["n10"]
    res = precision_search(model, ModelLink(model, 2)).run()
    c = res.crossing
    assert res.converged and c is not None
    assert res.buffer_packets == math.ceil(c.packets)
    lo, hi = res.uncertain_interval_packets or (0, 0)
    assert lo <= c.packets <= hi and hi - lo <= max(2, 0.25 * c.packets), (lo, hi, c)
    assert "interval" in res.note and not any(p.extended for p in res.probes)


def test_precision_rule_stops_when_a_sharp_bend_puts_the_line_a_packet_off_the_medians() -> None:
    """BBR at N = 10 (results/bbr/2026-11-27.log): 3 packets fail, 4 and 5 pass, and the line through
    the three crosses between 4 and 5 (the curve bends sharply there), outside the medians' bracket.
    Before the one-packet stop the search re-probed 3, 4 and 5 to its budget, unconverged. Now it
    stops within a packet, answering 4 with the interval 3..5 around it."""
    curve = {1: 0.70, 2: 0.82, 3: 0.93, 4: 0.993, 5: 0.997}
    rng = random.Random(3)

    def measure(buffer_bytes: int, n: int) -> list[float]:
        return [curve.get(buffer_bytes // FRAME_BYTES, 1.0) + rng.gauss(0, 0.002) for _ in range(n)]

    res = MedianSearch(measure, target=0.99, hi_packets=898, samples=3, first_guess_packets=35,
                       assume_hi_passes=True, precision=0.1).run()  # fmt: skip
    c = res.crossing
    assert res.converged and c is not None, res.note
    assert c.packets < c.low, c  # the case: the estimate, held at the bracket, lies below the line's interval
    # The interval reaches down to the failing end, 3: the medians put the crossing between 3 and 4.
    assert res.buffer_packets == 4 and res.uncertain_interval_packets == (3, 5)
    assert sum(len(p.samples) for p in res.probes) <= 40, res.probes  # the budget is 120


def test_one_packet_stop_needs_the_estimate_and_the_interval_within_one_packet() -> None:
    search = MedianSearch(lambda b, n: [], target=0.99, hi_packets=100, precision=0.1)

    def crossing(packets: float, low: float, high: float) -> Crossing:
        return Crossing(packets, low, high, 0.9, 0.05, 0.005, (3, 4, 5), (3, 4))

    assert search.precise_enough(crossing(4.0, 4.2, 4.8))  # 4.0..4.8: the log's case at probe 33
    assert not search.precise_enough(crossing(4.0, 4.4, 5.2))  # 1.2 packets
    assert search.precise_enough(crossing(40.0, 37.0, 44.0))  # +-9 %, the estimate inside
    assert not search.precise_enough(crossing(40.0, 41.0, 44.0))  # +-4 % but the estimate outside it


def test_precision_answer_is_never_the_failing_end_of_the_bracket() -> None:
    """A line crossing below the failing buffer holds the estimate at that buffer (no extrapolation);
    with the one-packet stop that estimate may lie outside the line's interval, and rounding it up
    would answer a buffer whose samples failed. The answer is the passing end, inside the interval."""
    search = MedianSearch(lambda b, n: [], target=0.99, hi_packets=100, precision=0.1)
    c = Crossing(3.0, 2.6, 3.0, 0.9, 0.05, 0.002, (2, 3, 4), (3, 4))
    assert search.precise_enough(c)
    res = search._precision_result(c, converged=True)
    assert res.buffer_packets == 4 and res.uncertain_interval_packets == (2, 4), res


def test_the_result_names_the_rule_that_decided_when_to_stop() -> None:
    from bufsize.longlived.search import SearchOptions, stopping_rule

    assert stopping_rule(SearchOptions(flows=10, samples=3)) == "fixed samples"  # the quick preset
    assert stopping_rule(SearchOptions(flows=10, samples=5, max_samples=20)) == "sign test"  # full, theory
    assert stopping_rule(SearchOptions(flows=10, samples=3, precision=0.1)) == "precision"


def test_calibration_stops_at_half_its_samples_only_when_they_agree() -> None:
    from types import SimpleNamespace

    from bufsize.longlived.search import calibrate

    lengths: list[float] = []

    def prober(values: list[float], cc: str = "cubic") -> SimpleNamespace:
        it = iter(values)
        link = SimpleNamespace(
            cfg=SimpleNamespace(rtt_ms=[87.0], cc=cc), buffer_bytes=898 * FRAME_BYTES, calibration_attempts=1
        )

        def rates(n: int, s: float) -> list[float]:
            lengths.append(s)
            return [next(it) for _ in range(n)]

        return SimpleNamespace(link=link, rates=rates)

    agree = [62.50, 62.49, 62.50, 62.51, 62.50] + [1.0] * 5  # the rest would drag the median down
    assert calibrate(prober(agree), 62.5, 10, lambda _: None) == agree[:5]
    differ = [62.50, 62.0, 62.5, 62.5, 62.5, 62.4, 62.5, 62.5, 62.5, 62.5]  # 0.8 % apart: take all ten
    assert calibrate(prober(differ), 62.5, 10, lambda _: None) == differ
    assert set(lengths) == {1.0}  # 10 RTTs of 87 ms, at least a second
    # BBR's reference samples span a ProbeRTT interval, as its probes do (its dip drains even 2 BDP).
    lengths.clear()
    calibrate(prober(agree, "bbr"), 62.5, 10, lambda _: None)
    assert set(lengths) == {10.0}


def test_an_estimate_held_at_the_passing_end_is_that_end_exactly_and_its_window_counts_as_local() -> None:
    """The line crosses above the passing buffer 9, so the estimate is held at 9; 6 lies exactly at
    9 / WINDOW. Held as exp(log(9)) = 9.000000000000002, 6 fell outside the estimate's window, the fit
    never read as local, and quick N = 200 (2026-11-28) probed on with its interval inside +-13 %."""
    s = {6: [0.975, 0.972, 0.978], 7: [0.982, 0.98, 0.984], 8: [0.986, 0.987, 0.985],
         9: [0.9902, 0.9901, 0.9903], 11: [0.991, 0.992, 0.9915], 13: [0.993, 0.994, 0.9935]}  # fmt: skip
    c = estimate(s, 0.99)
    assert c is not None and c.bracket == (8, 9)
    assert c.packets == 9.0 and c.low > 9.0, c  # held at the end, the line's interval beyond it
    assert 6 in c.buffers and c.local, c


def test_an_estimate_outside_the_lines_interval_widens_the_reported_one_to_the_bracket() -> None:
    """Medians and line disagree (held at 7, the line 7.1..7.8): the interval covers both, 6..8."""
    search = MedianSearch(lambda b, n: [], target=0.99, hi_packets=100, precision=0.2)
    held = Crossing(7.0, 7.1, 7.8, 0.9, 0.05, 0.004, (6, 7, 8), (6, 7))
    assert search._precision_result(held, converged=True).uncertain_interval_packets == (6, 8)
    inside = Crossing(7.0, 6.5, 7.8, 0.9, 0.05, 0.004, (6, 7, 8), (6, 7))  # agree: the line's own
    assert search._precision_result(inside, converged=True).uncertain_interval_packets == (6, 8)
    inside = Crossing(7.0, 6.7, 7.4, 0.9, 0.05, 0.004, (6, 7, 8), (6, 7))
    assert search._precision_result(inside, converged=True).uncertain_interval_packets == (6, 8)
    tight = Crossing(30.0, 28.2, 31.5, 0.9, 0.05, 0.004, (25, 30, 36), (25, 30))
    assert search._precision_result(tight, converged=True).uncertain_interval_packets == (28, 32)


def test_an_interval_reaching_past_the_searchs_top_ends_there() -> None:
    """A slope barely clear of its error puts the line's end far past anything probed (a search printed
    9.2..30245894464883044.0) or past float's range: the interval reported, and printed, ends at the top."""
    far = Crossing(12.3, 9.2, 3.0e16, 0.9, 0.01, 0.004, (9, 12, 15), (9, 15))
    assert far.interval(898) == (9.2, 898)
    assert Crossing(12.3, 9.2, math.inf, 0.9, 0.01, 0.004, (9, 12, 15), (9, 15)).interval(898) == (9.2, 898)
    assert far.interval() == (9.2, 3.0e16)  # no top given: the line's own
    search = MedianSearch(lambda b, n: [], target=0.99, hi_packets=898, precision=0.2)
    assert search._precision_result(far, converged=False).uncertain_interval_packets[1] <= 898


@pytest.mark.parametrize("guess", [15, 20, 35])
def test_a_failing_first_guess_is_doubled_not_bisected_toward_the_top(guess: int) -> None:
    """From a failing guess the next probe is twice it (a cc rule or the sweep's last answer is
    usually within a factor of two of the answer); bisecting toward the top (898) probed 116, 134 or
    177 first and took two more probes to come back. The link: the committed N = 10 searches' curve
    and noise, crossing at 50 packets (no doubled guess lands within 20 % of it, where noise decides)."""
    model = replace(MODELS["n10"], first_guess=guess)
    expected = [guess]
    while expected[-1] < model.crossing:
        expected.append(2 * expected[-1])
    for seed in range(3):
        res = precision_search(model, ModelLink(model, seed)).run()
        probed = [p.buffer_packets for p in res.probes]
        assert probed[: len(expected)] == expected, probed
        # Its 90 % interval may miss (one search in ten); the answer stays near the truth.
        assert res.converged and abs(res.buffer_packets / model.crossing - 1) <= 0.25, res.note


def test_a_passing_first_guess_or_none_is_bisected_as_before() -> None:
    link = SimLink(scale=11.0, noise=0.0005, seed=4)
    probed = [p.buffer_packets for p in MedianSearch(link, target=0.99, hi_packets=898, samples=3,
              first_guess_packets=60, assume_hi_passes=True, precision=0.2).run().probes]  # fmt: skip
    assert probed[:2] == [60, 30], probed
    link = SimLink(scale=11.0, noise=0.0005, seed=4)
    probed = [p.buffer_packets for p in MedianSearch(link, target=0.99, hi_packets=898, samples=3,
              assume_hi_passes=True, precision=0.2).run().probes]  # fmt: skip
    assert probed[0] == 449, probed


def test_calibration_tries_again_where_the_link_can_recover_and_names_why_it_refuses() -> None:
    """The emulation gets three tries (a busy moment passes), the twin one (a simulation repeats
    itself); the refusal quotes every median and the link's own reason."""
    from types import SimpleNamespace

    from bufsize.longlived.search import calibrate
    from bufsize.topologies.errors import RunError

    def prober(values: list[float], attempts: int) -> SimpleNamespace:
        it = iter(values)
        waits: list[float] = []
        link = SimpleNamespace(
            cfg=SimpleNamespace(rtt_ms=[20.0], cc="reno"), buffer_bytes=100 * FRAME_BYTES,
            calibration_attempts=attempts, calibration_shortfall="the reason", wait=waits.append,
        )  # fmt: skip
        timing = SimpleNamespace(warmup_s=7.0)
        return SimpleNamespace(link=link, rates=lambda n, s: [next(it) for _ in range(n)], timing=lambda b: timing,
                               waits=waits)  # fmt: skip

    low, good = [50.0] * 5, [62.5] * 5
    recovering = prober(low + good, attempts=3)
    assert calibrate(recovering, 62.5, 10, lambda _: None) == good
    assert recovering.waits == [7.0]  # one warm-up between the tries
    with pytest.raises(RunError, match=r"medians 50.0 Mb/s\): the reason"):
        calibrate(prober(low + good, attempts=1), 62.5, 10, lambda _: None)
