"""The bottleneck watched live: its rate, queue and drops printed every tenth of a second (the shell's `monitor`)."""

from __future__ import annotations

import time
from typing import TextIO

from bufsize.topologies.counters import rate_mbps
from bufsize.topologies.dumbbell import Dumbbell

MONITOR_EVERY_S = 0.1


def monitor(net: Dumbbell, seconds: float, out: TextIO) -> list[dict]:
    """Print (and return) one row per 0.1 s: Mb/s leaving the bottleneck, queue and drops."""
    rows = []
    out.write(f"{'t(s)':>6} {'rate(Mb/s)':>11} {'queue(pkts)':>12} {'queue(B)':>10} {'drops':>8}\n")
    with net.bottleneck.counters() as counters, net.bottleneck.leaf_reader() as leaf:
        t0 = prev = counters.read()
        end = t0.t + seconds
        while time.monotonic() < end - 1e-3:
            time.sleep(MONITOR_EVERY_S)
            now, q = counters.read(), leaf.read()
            row = {
                "t": round(now.t - t0.t, 3),
                "rate_mbps": round(rate_mbps(prev, now), 3),
                "qlen": q.qlen,
                "backlog": q.backlog,
                "drops": q.drops,
            }
            rows.append(row)
            out.write(f"{row['t']:6.2f} {row['rate_mbps']:11.3f} {q.qlen:12d} {q.backlog:10d} {q.drops:8d}\n")
            prev = now
    out.flush()
    return rows
