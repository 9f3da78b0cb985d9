"""Properties of the buffer search on the offline simulated link (longlived/simlink.py), over
generated links: utilization curves from steep to flatter than their noise, noise with and without
one-sided outliers, any seed. One property each, over many cases (Hypothesis)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from bufsize.longlived.median_search import MedianSearch
from bufsize.longlived.simlink import LinkModel, SimLink

CASES = settings(max_examples=150, deadline=None)  # each property over this many generated cases

links = st.builds(
    lambda crossing, exponent, noise, outliers, guess: LinkModel(
        "generated", crossing, exponent, noise, outliers, first_guess=max(1, round(crossing * guess))
    ),
    st.floats(min_value=2.0, max_value=300.0),
    st.floats(min_value=0.3, max_value=5.0),
    st.floats(min_value=0.0, max_value=0.012),
    st.sampled_from([0, 25, 40]),
    st.floats(min_value=0.3, max_value=3.0),
)


@CASES
@given(links, st.integers(0, 2**32 - 1), st.sampled_from([0.1, 0.2]))
def test_every_crossing_the_search_reports_lies_inside_its_own_interval(model, seed, precision):
    """Each progress line's estimate, and the result's, lie inside the interval printed beside them;
    the answer lies inside its result's interval, within the search's range."""
    seen = []

    def progress(_probe) -> None:  # noqa: ANN001
        c = search.crossing()
        if c is not None:
            seen.append((c.packets, *c.interval()))

    search = MedianSearch(SimLink(model, seed), target=model.target, hi_packets=model.hi_packets, samples=3,
                          first_guess_packets=model.first_guess, assume_hi_passes=True, precision=precision,
                          progress=progress)  # fmt: skip
    res = search.run()
    for estimate, low, high in seen:
        assert low <= estimate <= high, (estimate, low, high)
    lo, hi = res.uncertain_interval_packets
    assert 0 <= lo <= res.buffer_packets <= hi <= model.hi_packets, (lo, res.buffer_packets, hi)
    if res.crossing is not None:
        low, high = res.crossing.interval(model.hi_packets)
        assert low <= res.crossing.packets <= high
        assert lo <= math.floor(low) + 1 and math.ceil(min(high, model.hi_packets)) <= hi  # the result's holds it


@CASES
@given(st.floats(min_value=2.0, max_value=300.0), st.floats(min_value=0.5, max_value=5.0),
       st.floats(min_value=0.95, max_value=0.995), st.floats(min_value=0.95, max_value=0.995))  # fmt: skip
def test_on_a_noiseless_link_the_answer_is_the_links_own_and_grows_with_the_target(crossing, exponent, t1, t2):
    """Without noise the fixed-count search answers the smallest whole buffer whose utilization reaches
    the target, so a higher target never gets a smaller buffer. (Not the precision rule: its interval
    is of the samples' noise, and on a noiseless curve that bends inside the fit's window the line's
    bias stands outside it; docs/lab/search.md.)"""
    model = LinkModel("noiseless", crossing, exponent, 0.0)
    answers = []
    for target in sorted((t1, t2)):
        link = SimLink(model, 1)
        if link.utilization(model.hi_packets) < target:
            return  # this link cannot reach the target below the search's top
        truth = next(b for b in range(1, model.hi_packets + 1) if link.utilization(b) >= target)
        fixed = MedianSearch(link, target=target, hi_packets=model.hi_packets, samples=3).run()
        assert fixed.buffer_packets == truth, (target, fixed.buffer_packets, truth)
        answers.append(fixed.buffer_packets)
    assert answers[0] <= answers[1], answers
