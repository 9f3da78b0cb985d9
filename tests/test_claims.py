"""The claims the toolkit makes of its link, asserted on a real run at the seed's scale of one link:
62.5 Mb/s, an 87 ms RTT, 200 reno flows over 100 hosts, a 50-packet buffer, 20 s measured.

- The rate: the bottleneck serves the configured rate (the reference at 2 BDP, and the departures'
  own rate), not only what the same shaper serves at another setting: a shaper 15 % slow fails.
- The pacing: the line sends each frame one frame time after the last while it is busy (the median
  busy gap against 1514 B at C), and the run's own fidelity check passes.
- The delay under load: the flows' smoothed RTT is the base RTT plus the queue's mean wait
  (mean backlog over C). The receivers ACK every segment (--delayed-ack off): a delayed ACK holds the
  odd segment of a two- or three-packet window for up to 40 ms, which is TCP's, not the link's, delay.

Tolerances are what a quiet 2-core machine holds with room: measured when this test was written
(docs/lab/links.md), the median gap was 194.0 us against 193.8, every flow's median RTT within 0.6 ms
of the expected 93.4 ms, the reference 62.5 Mb/s.
"""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest
from conftest import bufsize

from bufsize.topologies import FRAME_BYTES

RATE_MBPS, RTT_MS, FLOWS, HOSTS, BUFFER = 62.5, 87.0, 200, 100, 50
FRAME_MS = FRAME_BYTES * 8 / (RATE_MBPS * 1e3)  # 0.194 ms: one frame's time at C
MEDIAN_TOLERANCE_MS = 1.5  # the flows' median; a delay line off by 2 % of 87 ms fails
RTT_TOLERANCE_MS = 3.0  # each flow


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("claims") / "measure"
    res = bufsize("measure", "--flows", str(FLOWS), "--hosts", str(HOSTS), "--rate-mbps", str(RATE_MBPS),
                  "--rtt-ms", f"{RTT_MS:g}", "--cc", "reno", "--buffer-packets", str(BUFFER), "--duration", "20",
                  "--fidelity-s", "5", "--delayed-ack", "off", "--json", "--out", str(out), timeout=400)  # fmt: skip
    if res.returncode == 3:  # flagged: name the checks that failed (the run's own verdict)
        result = json.loads(res.stdout)
        failed = [k for k, v in result.get("flags", {}).items() if v is False]
        pytest.fail(f"the claims' run was flagged: {failed}; cautions: {result.get('cautions')}")
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout), out


@pytest.mark.integration
def test_the_bottleneck_serves_the_configured_rate(run, no_leftovers):
    result, _ = run
    assert result["reference_rate_mbps"] >= 0.98 * RATE_MBPS, result["reference_rate_mbps"]
    assert abs(result["fidelity"]["rate_from_gaps_mbps"] - RATE_MBPS) <= 0.01 * RATE_MBPS, result["fidelity"]
    assert result["utilization"] >= 0.95, result["utilization"]  # 200 flows keep a 50-packet queue busy


@pytest.mark.integration
def test_the_line_paces_frames_at_the_frame_time(run, no_leftovers):
    fid = run[0]["fidelity"]
    assert fid["available"] is True and fid["gaps_busy"] > 10_000, fid
    assert abs(fid["median_gap_us"] - fid["ideal_us"]) <= 0.01 * fid["ideal_us"], fid
    assert fid["ideal_us"] == pytest.approx(FRAME_MS * 1000, rel=1e-3)
    assert run[0]["flags"]["pacing_fidelity_ok"] is True, fid


@pytest.mark.integration
def test_each_flows_rtt_is_the_base_rtt_plus_the_queues_wait(run, no_leftovers):
    result, out = run
    expected = RTT_MS + result["queue"]["mean_packets"] * FRAME_MS
    with open(out / "cwnd_flows.csv") as f:
        rows = list(csv.DictReader(f))
    end = max(float(r["t_s"]) for r in rows)
    srtt: dict[str, list[float]] = {}
    for r in rows:
        if float(r["t_s"]) >= end - 15:  # inside the 20 s measured at the buffer under study
            srtt.setdefault(r["flow"], []).append(float(r["srtt_ms"]))
    # Every flow was traced at some time; the trace records a flow when an ACK reaches it, so a flow
    # in RTO backoff for the whole window has no sample there. At 200 flows over 50 packets (a quarter
    # packet of buffer each) that is TCP's doing, not the link's delay: it needs timeouts (15 s of
    # backoff is four or more in a row; docs/lab/links.md records how many runs count). So a silent
    # flow is allowed where the run counted timeouts for it, and the claim must still cover three
    # flows in four.
    assert len({r["flow"] for r in rows}) == FLOWS
    per_flow = {flow: statistics.median(v) for flow, v in srtt.items()}
    silent = FLOWS - len(per_flow)
    timeouts = result["points"][0]["tcp"]["timeouts"]
    assert silent <= min(timeouts, FLOWS // 4), f"{silent} flows without a sample in 15 s; {timeouts} timeouts"
    # The flows' median RTT is the link's; a flow that spent much of the window in timeouts keeps a
    # stale estimate, so each traced flow is held to a looser bound, and all but one in twenty to it.
    middle = statistics.median(per_flow.values())
    assert abs(middle - expected) <= MEDIAN_TOLERANCE_MS, (middle, expected)
    off = {flow: round(m - expected, 2) for flow, m in per_flow.items() if abs(m - expected) > RTT_TOLERANCE_MS}
    assert len(off) <= FLOWS // 20, f"expected {expected:.2f} ms; flows off by more than {RTT_TOLERANCE_MS} ms: {off}"
