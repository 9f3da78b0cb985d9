"""The search logic against a simulated link: noisy, monotone in buffer, with a known threshold."""

from __future__ import annotations

import math
import random

import pytest

from buffersizing.median_search import MedianSearch
from topologies import FRAME_BYTES


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
