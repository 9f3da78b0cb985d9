"""One thread that records a run: bottleneck queue and rate, every flow's cwnd, per-core CPU.

Cadence (each tick is one netlink request of ~10 us, see qdisc_stats.py; nothing forks):
- queue (backlog bytes and packets, drops, the buffer limit, bytes sent) at `queue_hz` (100);
- rate from the bytes-sent counter and the sum of cwnd at a tenth of that (10 Hz);
- each flow's cwnd, and per-core busy/softirq/idle/steal shares, once a second.
The thread measures its own CPU time, so every run reports what monitoring cost.
"""

from __future__ import annotations

import bisect
import csv
import math
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bufsize.monitors.base import Monitor
from bufsize.monitors.cpu import ForeignCpu, share_between
from bufsize.monitors.cwnd import CwndTrace, CwndUnavailable, trace_duty
from bufsize.topologies.bottleneck import Bottleneck
from bufsize.topologies.ledger import RunState
from bufsize.topologies.qdisc_stats import QdiscSample
from bufsize.topologies.safefiles import atomic_text, make_dirs

STALE_S = 10.0  # seconds without a cwnd event after which a flow leaves the snapshots


@dataclass
class Recording:
    queue: list[QdiscSample] = field(default_factory=list)
    rate: list[tuple[float, float]] = field(default_factory=list)  # (t, Mb/s over the last rate period)
    cwnd_sum: list[tuple[float, int, int, int | None]] = field(default_factory=list)  # t, flows, sum, limit
    cwnd_flows: list[tuple[float, str, int, int, float]] = field(default_factory=list)  # t, flow, cwnd, ssth, srtt ms
    # Once a second: flows with an event in that second, and how many of them had cwnd >= ssthresh.
    ca_counts: list[tuple[float, int, int]] = field(default_factory=list)
    # t, core, busy, softirq, idle, steal
    cpu: list[tuple[float, int, float, float, float, float]] = field(default_factory=list)
    cwnd_note: str = ""
    cwnd_overruns: int = 0
    cwnd_duty: float = 1.0  # the share of each rate period the cwnd trace was on (monitors/cwnd.trace_duty)
    thread_cpu_s: float = 0.0
    wall_s: float = 0.0
    error: str = ""
    foreign: dict | None = None  # ForeignCpu.result() over the recording: CPU of processes outside the run


def _core_shares(a: list, b: list) -> list[tuple[float, float, float, float]]:
    return [(c.busy, c.softirq, c.idle, c.steal) for c in (share_between(x, y) for x, y in zip(a, b, strict=True))]


def idle_per_second(cpu: list, t0: float = -math.inf, t1: float = math.inf) -> list[float]:
    """The machine's idle share (mean over cores) in each second of `Recording.cpu` from t0 to t1."""
    by_t: dict[float, list[float]] = {}
    for t, _core, _busy, _soft, idle, _steal in cpu:
        if t0 <= t <= t1:
            by_t.setdefault(t, []).append(idle)
    return [statistics.fmean(v) for v in by_t.values()]


class Recorder(Monitor[Recording]):
    """The recorder thread of one run, on its bottleneck; cwnd of the flows whose server ports are given."""

    def __init__(
        self,
        bottleneck: Bottleneck,
        server_ports: range | None,
        state: RunState | None = None,
        queue_hz: float = 100.0,
        slow_every: int = 10,
    ) -> None:
        self.reader = bottleneck.leaf_reader()
        self.ports = server_ports
        self.state = state
        self.period = 1.0 / queue_hz
        self.slow_every = slow_every
        self.rec = Recording()
        # The trace is on for the first `on_ticks` queue ticks of each rate period: trace_duty rounded
        # up to whole ticks, and that share (0.3 at 1 Gb/s, not 0.24) is what the result reports.
        self.on_ticks = max(1, math.ceil(trace_duty(bottleneck.rate_mbps) * slow_every - 1e-9))
        self.rec.cwnd_duty = self.on_ticks / slow_every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bsz-recorder", daemon=True)

    def _begin(self) -> None:
        self.foreign = ForeignCpu()
        self._thread.start()

    def _end(self) -> Recording:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self.reader.close()
        try:
            self.rec.foreign = self.foreign.result()
        except psutil.Error as e:  # /proc unreadable: the result says so, no caution either way
            self.rec.foreign = {"share": None, "top": [], "error": str(e)}
        return self.rec

    def _run(self) -> None:
        rec = self.rec
        cpu0 = time.thread_time()
        wall0 = time.monotonic()
        trace = None
        if self.ports is not None:
            try:
                trace = CwndTrace(self.ports, self.state).start()
            except (CwndUnavailable, OSError) as e:
                rec.cwnd_note = str(e)
        else:
            rec.cwnd_note = "no flow ports given"
        windows: dict[bytes, tuple[bytes, bytes, bytes]] = {}  # flow -> latest (cwnd, ssthresh, srtt_us), raw
        seen: dict[bytes, float] = {}  # flow -> when its latest event was drained
        cores = psutil.cpu_times(percpu=True)
        t_cores = time.monotonic()
        last_rate: QdiscSample | None = None
        tick = 0
        next_t = time.monotonic()
        try:
            while not self._stop.is_set():
                s = self.reader.read()
                rec.queue.append(s)
                if tick % self.slow_every == 0:
                    if last_rate is not None and s.t > last_rate.t:
                        rec.rate.append((s.t, (s.bytes - last_rate.bytes) * 8 / (s.t - last_rate.t) / 1e6))
                    last_rate = s
                    if trace is not None:
                        if tick and self.on_ticks < self.slow_every:  # started on
                            trace.pause(False)
                        for _t, flow, cwnd, ssthresh, srtt in trace.drain():
                            windows[flow] = (cwnd, ssthresh, srtt)
                            seen[flow] = s.t
                        if windows:
                            total = sum(int(w[0]) for w in windows.values())
                            rec.cwnd_sum.append((s.t, len(windows), total, s.limit))
                elif trace is not None and tick % self.slow_every == self.on_ticks:
                    trace.pause(True)
                if s.t - t_cores >= 1.0:
                    now = psutil.cpu_times(percpu=True)
                    for core, share in enumerate(_core_shares(cores, now)):
                        rec.cpu.append((s.t, core, *share))
                    cores, t_cores = now, s.t
                    # A flow silent for STALE_S has ended (short flows come and go by thousands) or
                    # sits in a long timeout with a window of one: it leaves the snapshots.
                    for f in [f for f, t in seen.items() if s.t - t > STALE_S]:
                        del windows[f], seen[f]
                    active = [windows[f] for f, t in seen.items() if s.t - t <= 1.0 + 2 * self.period]
                    rec.ca_counts.append((s.t, len(active), sum(int(c) >= int(ss) for c, ss, _ in active)))
                    rec.cwnd_flows.extend(
                        (s.t, f.decode(), int(c), int(ss), int(r) / 1000) for f, (c, ss, r) in windows.items()
                    )
                tick += 1
                next_t += self.period
                delay = next_t - time.monotonic()
                if delay < -self.period:  # fell behind (a stall): do not try to catch up in a burst
                    next_t = time.monotonic()
                self._stop.wait(max(0.0, delay))
        except Exception as e:  # the run goes on without its monitor; the summary says why
            rec.error = f"{type(e).__name__}: {e}"
        finally:
            if trace is not None:
                rec.cwnd_overruns = trace.stop()
            rec.thread_cpu_s = time.thread_time() - cpu0
            rec.wall_s = time.monotonic() - wall0


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def window(samples: Sequence[QdiscSample], t0: float = -math.inf, t1: float = math.inf) -> Sequence[QdiscSample]:
    """The samples between two monotonic times (the recorder appends them in time order)."""
    return samples[
        bisect.bisect_left(samples, t0, key=lambda s: s.t) : bisect.bisect_right(samples, t1, key=lambda s: s.t)
    ]


def queue_stats(samples: Sequence[QdiscSample], t0: float = -math.inf, t1: float = math.inf) -> dict:
    """Backlog statistics (packets of the leaf) between two monotonic times."""
    sel = window(samples, t0, t1)
    if not sel:
        return {"samples": 0}
    pk = [s.qlen for s in sel]
    gaps = [b.t - a.t for a, b in zip(sel, sel[1:], strict=False)]
    return {
        "samples": len(sel),
        "mean_packets": round(statistics.fmean(pk), 2),
        "median_packets": statistics.median(pk),
        "p99_packets": _pct(pk, 0.99),
        "max_packets": max(pk),
        "max_bytes": max(s.backlog for s in sel),  # the limit is in bytes: small frames fit more packets
        "mean_bytes": round(statistics.fmean(s.backlog for s in sel), 1),
        "empty_fraction": round(sum(q == 0 for q in pk) / len(pk), 4),
        "max_sample_gap_ms": round(max(gaps) * 1e3, 1) if gaps else None,
        "drops": sel[-1].drops - sel[0].drops,
    }


def summary(rec: Recording) -> dict:
    out: dict = {"error": rec.error or None, "wall_s": round(rec.wall_s, 1)}
    out["monitor_cpu_share_of_one_core"] = round(rec.thread_cpu_s / rec.wall_s, 4) if rec.wall_s else None
    if rec.queue:
        span = rec.queue[-1].t - rec.queue[0].t
        out["queue"] = queue_stats(rec.queue) | {"rate_hz": round((len(rec.queue) - 1) / span, 1) if span else None}
    if rec.rate:
        out["rate_mbps_mean"] = round(statistics.fmean(r for _, r in rec.rate), 3)
    sums = [s for _, _, s, _ in rec.cwnd_sum]
    out["cwnd"] = {
        "available": bool(sums),
        "note": rec.cwnd_note or None,
        "flows_seen": max((n for _, n, _, _ in rec.cwnd_sum), default=0),
        "trace_overruns": rec.cwnd_overruns,
        "trace_duty": round(rec.cwnd_duty, 3),
    }
    if len(sums) > 1:
        out["cwnd"] |= {"sum_mean": round(statistics.fmean(sums), 1), "sum_sd": round(statistics.stdev(sums), 1)}
    if rec.cpu:
        machine_idle = idle_per_second(rec.cpu)
        out["cpu"] = {
            "seconds": len(machine_idle),
            "min_idle_share_per_second": round(min(machine_idle), 3),
            "mean_softirq_share": round(statistics.fmean(r[3] for r in rec.cpu), 3),
            "mean_steal_share": round(statistics.fmean(r[5] for r in rec.cpu), 3),
            "max_steal_share_per_core_second": round(max(r[5] for r in rec.cpu), 3),
        }
    if rec.foreign is not None:
        out.setdefault("cpu", {})["foreign"] = rec.foreign
    return out


def write_csvs(rec: Recording, out: Path) -> list[str]:
    """Raw data beside the result: queue.csv, rate.csv, cwnd_sum.csv, cwnd_flows.csv, cpu.csv."""
    t0 = rec.queue[0].t if rec.queue else 0.0
    tables: dict[str, tuple[list[str], list]] = {
        "queue.csv": (
            ["t_s", "backlog_packets", "backlog_bytes", "drops", "limit_bytes", "sent_bytes"],
            [(round(s.t - t0, 4), s.qlen, s.backlog, s.drops, s.limit, s.bytes) for s in rec.queue],
        ),
        "rate.csv": (["t_s", "rate_mbps"], [(round(t - t0, 4), round(r, 3)) for t, r in rec.rate]),
        "cwnd_sum.csv": (
            ["t_s", "flows_seen", "cwnd_sum_packets", "limit_bytes"],
            [(round(t - t0, 3), n, s, lim) for t, n, s, lim in rec.cwnd_sum],
        ),
        "cwnd_flows.csv": (
            ["t_s", "flow", "cwnd_packets", "ssthresh", "srtt_ms"],
            [(round(t - t0, 3), f, c, ss, round(r, 2)) for t, f, c, ss, r in rec.cwnd_flows],
        ),
        "cpu.csv": (
            ["t_s", "core", "busy", "softirq", "idle", "steal"],
            [(round(t - t0, 3), c, *(round(x, 3) for x in shares)) for t, c, *shares in rec.cpu],
        ),
    }
    make_dirs(out)
    for name, (header, rows) in tables.items():
        with atomic_text(out / name) as f:
            w = csv.writer(f)
            w.writerow(header)
            w.writerows(rows)
    return list(tables)
