"""Samples the hypervisor took CPU from: each sample's steal, and the retakes (monitors/rate.py)."""

from __future__ import annotations

from collections import namedtuple

import pytest

from bufsize.monitors.rate import RateSamples, quiet_samples, sample_rates
from bufsize.topologies.counters import CounterSample

Times = namedtuple("Times", "user system idle steal")


class ScriptedCounters:
    """A link sending 1 MB per read, one second apart."""

    def __init__(self) -> None:
        self.reads = 0

    def read(self) -> CounterSample:
        self.reads += 1
        return CounterSample(float(self.reads), self.reads * 1_000_000, self.reads * 700, 0, 0, 0)


def test_each_sample_carries_the_steal_of_its_own_span():
    # Cumulative CPU seconds at each read: 10 s of CPU a sample, of which 0, 0.5 and 2 s stolen.
    stolen = iter([0.0, 0.0, 0.5, 2.5])
    calls = []

    def cpu_times() -> Times:
        calls.append(1)
        s = next(stolen)
        return Times(5.0 * len(calls), 0.0, 5.0 * len(calls) - s, s)

    got = sample_rates(ScriptedCounters(), 3, 0.0, sleep=lambda _: None, cpu_times=cpu_times)
    assert got.rates_mbps == [8.0, 8.0, 8.0]
    assert got.steal == pytest.approx([0.0, 0.05, 0.2])
    assert len(calls) == 4  # one read at each boundary, none per sample beyond


def scripted(samples: list[tuple[float, float]]):
    """take(k) handing out (rate, steal) pairs in order; the calls' sizes are recorded."""
    left = list(samples)
    sizes: list[int] = []

    def take(k: int) -> RateSamples:
        sizes.append(k)
        got, left[:] = left[:k], left[k:]
        assert len(got) == k, "took more samples than scripted"
        return RateSamples([r for r, _ in got], 0, 0, float(k), [s for _, s in got])

    return take, sizes


def test_stolen_samples_are_retaken_and_the_kept_ones_stay_in_order():
    take, sizes = scripted([(60, 0.0), (50, 0.03), (61, 0.001), (40, 0.2), (62, 0.0), (63, 0.004)])
    got = quiet_samples(take, 3, 0.005, 6)
    assert got.rates_mbps == [60, 61, 62] and got.steal == [0.0, 0.001, 0.0]
    assert got.set_aside == [(50, 0.03), (40, 0.2)]
    assert sizes == [3, 1, 1]  # only as many again as were stolen, each round
    assert not [s for s in got.steal if s > 0.005]  # none kept past the limit


def test_where_the_retakes_run_out_the_least_stolen_fill_in_and_are_counted():
    take, sizes = scripted([(50, 0.03), (60, 0.0), (40, 0.2), (45, 0.01), (30, 0.5)])
    got = quiet_samples(take, 3, 0.005, 2)
    assert sizes == [3, 2]
    # Quiet: 60 only; then the least stolen of the rest (45 at 1 %, 50 at 3 %), as taken.
    assert got.rates_mbps == [50, 60, 45] and sum(s > 0.005 for s in got.steal) == 2
    assert got.set_aside == [(40, 0.2), (30, 0.5)]


def test_a_limit_of_zero_keeps_every_sample_as_taken():
    take, sizes = scripted([(50, 0.3), (60, 0.0)])
    got = quiet_samples(take, 2, 0.0, 4)
    assert got.rates_mbps == [50, 60] and got.set_aside == [] and sizes == [2] and got.steal == [0.3, 0.0]


def test_samples_without_a_steal_reading_count_as_quiet():
    def take(k: int) -> RateSamples:
        return RateSamples([55.0] * k, 0, 0, float(k))

    got = quiet_samples(take, 4, 0.005, 8)
    assert got.rates_mbps == [55.0] * 4 and got.steal == [0.0] * 4 and got.set_aside == []


def test_the_option_reaches_search_and_sweep_and_sweeps_made_before_it_resume_only_without_it(tmp_path):
    """Sweeps made before --max-sample-steal counted every sample: resumed, they keep doing so (the
    command that made them, with --max-sample-steal 0); with the default they are refused by name.
    The twin refuses the option (nothing steals a simulation's CPU); out of range is refused."""
    import json

    from bufsize.cli import build_parser
    from bufsize.cli.commands import cmd_search
    from bufsize.cli.sim import search_options
    from bufsize.longlived.sweep import existing_manifest, make_spec, spec_from_args
    from bufsize.monitors.cpu import SAMPLE_STEAL_LIMIT
    from bufsize.topologies.errors import UsageError

    p = build_parser()
    made = spec_from_args(p.parse_args(["sweep", "--flows", "2", "--out", str(tmp_path)]))
    assert made.search["max_sample_steal"] == SAMPLE_STEAL_LIMIT
    off = spec_from_args(p.parse_args(["sweep", "--flows", "2", "--out", str(tmp_path), "--max-sample-steal", "0"]))
    assert off.search["max_sample_steal"] == 0.0
    old = off.to_dict()
    del old["search"]["max_sample_steal"]
    (tmp_path / "manifest.json").write_text(json.dumps({"spec": old, "machine": {"shaper": "line"}}))
    assert existing_manifest(tmp_path, off) is not None
    with pytest.raises(UsageError, match="max_sample_steal was 0.0, now 0.005"):
        existing_manifest(tmp_path, make_spec(None, [2], {}, {}))
    with pytest.raises(UsageError, match="--max-sample-steal"):
        cmd_search(p.parse_args(["search", "--flows", "2", "--max-sample-steal", "0.9", "--print-config"]))
    assert search_options(p.parse_args(["sim", "search", "--flows", "2"]), 2).max_sample_steal == 0.0
    with pytest.raises(UsageError, match="no hypervisor"):
        search_options(p.parse_args(["sim", "search", "--flows", "2", "--max-sample-steal", "0.01"]), 2)


def test_print_config_names_the_limit(capsys):
    import json

    from bufsize.cli import build_parser
    from bufsize.cli.commands import cmd_search

    p = build_parser()
    assert cmd_search(p.parse_args(["search", "--flows", "2", "--print-config"])) == 0
    assert json.loads(capsys.readouterr().out)["max_sample_steal"] == 0.005
    assert cmd_search(p.parse_args(["search", "--flows", "2", "--max-sample-steal", "0", "--print-config"])) == 0
    assert json.loads(capsys.readouterr().out)["max_sample_steal"] == 0.0
