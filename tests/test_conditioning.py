"""The conditioning a search reports (longlived/conditioning.py), on the offline simulated link: a
steep curve pins the buffer down, a curve flatter than its noise does not, and the result says which
in fields a program reads."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from bufsize.longlived.conditioning import conditioning, curve
from bufsize.longlived.median_search import MedianSearch
from bufsize.longlived.simlink import MODELS, LinkModel, SimLink


def search(model: LinkModel, seed: int = 1):  # noqa: ANN201 (a SearchResult)
    return MedianSearch(SimLink(model, seed), target=model.target, hi_packets=model.hi_packets, samples=3,
                        first_guess_packets=model.first_guess, assume_hi_passes=True, precision=0.1).run()  # fmt: skip


def test_a_steep_curve_is_well_conditioned_and_a_flat_one_is_not():
    steep = search(replace(MODELS["n100"], noise=0.002))
    c = conditioning(steep.probes, 0.99, steep.buffer_packets, 0.1)
    assert not c["ill_conditioned"] and c["statement"].startswith("well-conditioned"), c
    lo, hi = c["range_packets"]
    assert lo <= steep.buffer_packets <= hi and hi / lo <= 1.25, c

    flat = search(MODELS["flat"])
    f = conditioning(flat.probes, 0.99, flat.buffer_packets, 0.1)
    lo, hi = f["range_packets"]
    assert (
        f["ill_conditioned"]
        and f["statement"] == f"ill-conditioned: the target is reached anywhere in [{lo}, {hi}] packets"
    )
    assert f["range_to_answer"][1] > 1.1 or f["range_to_answer"][0] < 0.9, f


def test_the_curve_has_every_probed_buffer_once_with_its_median_inside_its_interval():
    res = search(MODELS["n10"])
    rows = curve(res.probes)
    probed = sorted({p.buffer_packets for p in res.probes})
    assert [r["buffer_packets"] for r in rows] == probed
    for r in rows:
        assert r["samples"] == sum(len(p.samples) for p in res.probes if p.buffer_packets == r["buffer_packets"])
        assert r["low"] <= r["median"] <= r["high"]


@settings(max_examples=100, deadline=None)
@given(st.floats(2.0, 300.0), st.floats(0.3, 5.0), st.floats(0.0, 0.012), st.integers(0, 2**32 - 1))
def test_the_range_holds_the_answer_and_the_flag_says_what_the_range_does(crossing, exponent, noise, seed):
    model = LinkModel("generated", crossing, exponent, noise, first_guess=max(1, round(crossing)))
    res = search(model, seed)
    c = conditioning(res.probes, model.target, res.buffer_packets, 0.1)
    lo, hi = c["range_packets"]
    assert lo <= res.buffer_packets <= hi
    wide = (res.buffer_packets - lo) / res.buffer_packets > 0.1 or (hi - res.buffer_packets) / res.buffer_packets > 0.1
    assert c["ill_conditioned"] == wide
