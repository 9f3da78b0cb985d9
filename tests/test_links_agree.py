"""One configuration on both links: the emulated dumbbell (real kernel TCP) and the ns-3 twin, by the
same command with `--link`, against each other and, for one flow, against the fluid sawtooth.

Reno on 10 Mb/s with a 20 ms RTT (a BDP of 16.5 packets), 20 s measured, judged by the median of
the one-second samples. Tolerance 2 points of utilization between the links: both TCPs (Linux's and
ns-3's TcpLinuxReno) follow the same Reno rules, and a link that served late or a twin whose TCP
differed would move them apart by more.
What was measured when these tests were written is in docs/lab/links.md, with the one configuration
tried that the links do not yet agree on (four flows at a quarter BDP), which is not asserted here.
"""

from __future__ import annotations

import json
import sys

import pytest
from conftest import measured

from bufsize.theory.model import single_flow_utilization
from bufsize.topologies import FRAME_BYTES

RATE_MBPS, RTT_MS = 10.0, 20.0
BDP_PACKETS = RATE_MBPS * 1e6 / 8 * RTT_MS / 1000 / FRAME_BYTES  # 16.5
TOLERANCE = 0.02


def measure(link: str, flows: int, buffer_packets: int, out) -> dict:
    """One run, measured again if it flagged itself under load from outside it (conftest.measured)."""
    args = ["--link", link, "--flows", str(flows), "--hosts", str(flows), "--rate-mbps", str(RATE_MBPS),
            "--rtt-ms", str(RTT_MS), "--cc", "reno", "--buffer-packets", str(buffer_packets),
            "--duration", "20"]  # fmt: skip
    run, result, out = measured(*args, out=out)
    assert run.returncode == 0, run.stderr[-2000:]  # 3 would be a flagged (invalid) run
    assert json.loads((out / "result.json").read_text()) == result  # the file is what was printed
    assert result["kind"] == ("measure" if link == "emulated" else "sim-measure")
    # The same steps on either link (longlived/measure.py): warm-up, reference, settle, samples.
    assert [p["utilization_samples"]["n"] for p in result["points"]] == [20]
    return result


def utilization(link: str, flows: int, buffer_packets: int, tmp_path) -> float:
    """The median of the run's 20 one-second utilization samples: the statistic a search decides on.
    The mean of a one-flow emulated run fell up to 2.5 points under it when the unpaced flow stalled
    for a second or so at half its window after a burst of drops (docs/lab/links.md), which the twin's
    TCP does not do."""
    result = measure(link, flows, buffer_packets, tmp_path / f"{link}-n{flows}-b{buffer_packets}")
    samples = result["points"][0]["utilization_samples"]
    print(f"{link}, {flows} flows, {buffer_packets} packets: median {samples['median']}, mean "
          f"{result['utilization']}, least sample {samples['min']}", file=sys.stderr)  # fmt: skip
    return samples["median"]


@pytest.mark.integration
def test_four_reno_flows_keep_a_bdp_buffered_link_full_on_both_links(tmp_path, no_leftovers):
    """With a whole BDP of buffer the queue never empties on either link."""
    buffer_packets = round(BDP_PACKETS)
    emulated = utilization("emulated", 4, buffer_packets, tmp_path)
    simulated = utilization("simulated", 4, buffer_packets, tmp_path)
    assert abs(emulated - simulated) <= TOLERANCE, (emulated, simulated)
    assert min(emulated, simulated) >= 0.98, (emulated, simulated)


@pytest.mark.integration
def test_one_reno_flow_idles_alike_on_both_links_and_below_the_fluid_sawtooth(tmp_path, no_leftovers):
    """A quarter BDP (4 packets): the link idles in each trough of the one window. Both links carry the
    same share within 2 points. Both fall short of the fluid sawtooth (theory.model, F2/F19) by 6-8
    points as measured, and neither exceeds it; which of the model's assumptions the kernel's and
    ns-3's Reno depart from is not yet tested (docs/lab/links.md)."""
    buffer_packets = round(0.25 * BDP_PACKETS)
    model = single_flow_utilization(buffer_packets, BDP_PACKETS)  # 0.890
    got = {link: utilization(link, 1, buffer_packets, tmp_path) for link in ("emulated", "simulated")}
    assert abs(got["emulated"] - got["simulated"]) <= TOLERANCE, got
    for link, u in got.items():
        assert model - 0.09 <= u <= model + TOLERANCE, (link, u, model, got)
