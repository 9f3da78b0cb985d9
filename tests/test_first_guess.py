"""Where a search probes first (issue 30, item 2): the congestion control's rule, or a sweep's
earlier answers. No traffic: results are written by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bufsize.longlived.search import model_guess, theory
from bufsize.longlived.sweep import make_spec, point_dir, sweep_guess
from bufsize.topologies.config import DumbbellConfig


def guess(cc: str, flows: int) -> tuple[int, str]:
    cfg = DumbbellConfig(hosts=min(flows, 4), rtt_ms=[87.0] * min(flows, 4), cc=cc)
    g = model_guess(cfg, flows, theory(cfg, flows))
    return g.packets, g.source


def test_the_rule_of_the_cc_in_use() -> None:
    bdp = 62.5e6 / 8 * 0.087 / 1514  # 448.9 frames
    assert guess("reno", 10) == (round(bdp / math.sqrt(10)), "the reno rule, 1.00 x RTT*C/sqrt(N)")
    packets, source = guess("cubic", 10)
    assert packets == round(0.4777 * bdp / math.sqrt(10)) == 68 and "cubic rule, 0.48" in source
    assert guess("cubic", 1)[0] == round(bdp * 0.3 / 0.7) and "one flow" in guess("cubic", 1)[1]
    assert guess("bbr", 4)[0] == round(bdp / 8)
    # a congestion control without a rule falls back to Reno's, and says so
    assert guess("vegas", 10) == (round(bdp / math.sqrt(10)), "RTT*C/sqrt(N) (no rule for vegas)")


def write(out: Path, flows: int, run: int, answer: int, converged: bool = True) -> None:
    d = point_dir(out, flows, run)
    d.mkdir(parents=True)
    result = {"flows": flows, "buffer_packets": answer, "flags": {"converged": converged}}
    (d / "result.json").write_text(json.dumps(result))


@pytest.fixture
def spec():
    return make_spec(None, [2, 10, 100], {"runs": 3, "cc": "cubic"}, {})


def test_sweep_guess_from_the_same_n_first_then_the_nearest_n(tmp_path: Path, spec) -> None:
    assert sweep_guess(tmp_path, spec, 2, 1) is None  # nothing finished yet
    write(tmp_path, 2, 1, 100)
    g = sweep_guess(tmp_path, spec, 10, 1)
    assert g is not None and g.packets == round(100 * math.sqrt(2 / 10)) == 45
    assert g.source == "this sweep's answer at N=2 x sqrt(2/10)"
    write(tmp_path, 10, 1, 50)
    g = sweep_guess(tmp_path, spec, 100, 1)  # N = 10 is nearer 100 than N = 2 is
    assert g is not None and g.packets == round(50 * math.sqrt(10 / 100)) == 16
    # Later runs at an N start from the median of its earlier ones; an unconverged answer is no guide.
    write(tmp_path, 10, 2, 54)
    write(tmp_path, 10, 3, 400, converged=False)
    g = sweep_guess(tmp_path, spec, 10, 3)
    assert g is not None and g.packets == 52 and "2 runs at N=10" in g.source
    # A point's own (older) result does not guess for itself: N = 2 run 1 scales N = 10's median.
    g = sweep_guess(tmp_path, spec, 2, 1)
    assert g is not None and g.packets == round(52 * math.sqrt(10 / 2)) == 116
    # A truncated or foreign result is skipped.
    (point_dir(tmp_path, 100, 2)).mkdir(parents=True)
    (point_dir(tmp_path, 100, 2) / "result.json").write_text("{")
    g = sweep_guess(tmp_path, spec, 100, 3)
    assert g is not None and g.packets == 16
