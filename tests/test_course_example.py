"""The course kit's example script runs as documented and shows what it claims."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import pytest

from bufsize.course import example as ex
from bufsize.topologies import FRAME_BYTES

pytestmark = pytest.mark.integration


def test_course_example_pings_watches_and_cuts_the_buffer(no_leftovers):
    res = subprocess.run([sys.executable, "-m", "bufsize.course.example"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    rtts = [float(t) for t in re.findall(r"[\d.]+", re.search(r"ping h1 -> r1: \[(.*)\] ms", out).group(1))]
    assert len(rtts) == 3 and all(t >= ex.RTT_MS for t in rtts), out
    util = [float(u) / 100 for u in re.search(r"utilization: ([\d.]+)% at RTT\*C, ([\d.]+)%", out).groups()]
    assert all(0 < u <= 1.02 for u in util), out  # the flows carried data and nothing beat the shaper
    peaks = [int(p) for p in re.search(r"peak queue: (\d+) and (\d+) packets", out).groups()]
    bdp = ex.RATE_MBPS * 1e6 / 8 * ex.RTT_MS / 1000 / FRAME_BYTES
    small = max(2, round(bdp / math.sqrt(ex.FLOWS)))
    assert peaks[1] <= small < peaks[0], out  # the in-place cut took effect; the BDP buffer held more
