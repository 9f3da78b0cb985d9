"""`bufsize verify`: build the dumbbell and measure that its RTTs and bottleneck rate are what was asked."""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bufsize.monitors.cpu import CpuMonitor, ForeignCpu
from bufsize.scaffold.cautions import cautions
from bufsize.scaffold.cautions import describe as describe_cautions
from bufsize.scaffold.experiment import Experiment, Say
from bufsize.scaffold.manifest import machine_manifest
from bufsize.scaffold.resultdir import write_json_atomic
from bufsize.topologies import netns
from bufsize.topologies.config import DumbbellConfig
from bufsize.topologies.counters import InterfaceCounters, rate_mbps
from bufsize.topologies.dumbbell import Dumbbell, Host
from bufsize.topologies.errors import RunError
from bufsize.topologies.proc import run, sleep_checked
from bufsize.topologies.units import check_number
from bufsize.traffic.longflows import LongFlows

# Tolerances of the verification: min RTT within 1 % + 0.3 ms, rate within 97..101 % of configured.
RTT_REL_TOL = 0.01
RTT_ABS_TOL_MS = 0.3
RATE_LOW, RATE_HIGH = 0.97, 1.01
# The rate test reads the counters every 0.1 s and reports per-second rates: under a second it has
# no whole second to report (and under 0.1 s not even two reads to divide by).
MIN_RATE_TEST_S = 1.0
MAX_RATE_TEST_S = 3600.0


def check_duration(seconds: float) -> None:
    """--duration of the rate test."""
    check_number("--duration", seconds, MIN_RATE_TEST_S, MAX_RATE_TEST_S, lo_inclusive=True)


@dataclass
class PingResult:
    host: int
    configured_ms: float
    min_ms: float
    avg_ms: float
    max_ms: float
    loss_pct: float

    @property
    def ok(self) -> bool:
        tol = RTT_REL_TOL * self.configured_ms + RTT_ABS_TOL_MS
        return self.loss_pct < 50 and abs(self.min_ms - self.configured_ms) <= tol


def ping_host(net: Dumbbell, h: Host, count: int, interval: float) -> PingResult:
    # Each reply is waited for up to one RTT plus 2 s; no -w deadline, which would count replies
    # still in flight when it expires as lost.
    wait = int(h.rtt_ms / 1000 + 2)
    argv = ["ping", "-n", "-q", "-c", str(count), "-i", f"{interval:g}", "-W", str(wait), net.receiver_ip]
    res = run(netns.in_ns(h.ns, argv), check=False, timeout=count * interval + wait + 10)
    loss = re.search(r"([\d.]+)% packet loss", res.stdout)
    rtt = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/", res.stdout)
    if not rtt or not loss:
        raise RunError(f"ping from h{h.index} to the receiver got no replies: {res.stdout.strip()[-200:]}")
    mn, avg, mx = (float(x) for x in rtt.groups())
    return PingResult(h.index, h.rtt_ms, mn, avg, mx, float(loss.group(1)))


def measure_rtts(net: Dumbbell, count: int = 20, interval: float = 0.05) -> list[PingResult]:
    with ThreadPoolExecutor(16) as pool:
        return list(pool.map(lambda h: ping_host(net, h, count, interval), net.hosts))


@dataclass
class RateResult:
    configured_mbps: float
    measured_mbps: float
    seconds: float
    per_second_mbps: list[float]
    bottleneck_drops: int
    flows: int = 0
    fill_seconds: float = 0.0  # warm-up plus the wait for a full second at the rate

    @property
    def ratio(self) -> float:
        return self.measured_mbps / self.configured_mbps

    @property
    def ok(self) -> bool:
        return RATE_LOW <= self.ratio <= RATE_HIGH


# The rate test measures the link, not TCP: with one Reno flow per host, a loss burst at the end of
# slow start leaves the pipe part-empty for many seconds at 87 ms (CI once read 81 % that way), so it
# runs at least RATE_TEST_FLOWS flows, each of which regrows its share that many times faster, and it
# waits (up to a limit) for one whole second at the rate before it starts measuring.
RATE_TEST_FLOWS = 8
FILL_WINDOW_S = 1.0
MAX_FILL_RTTS = 100
MIN_FILL_LIMIT_S = 10.0


def measure_rate(net: Dumbbell, duration: float = 5.0, warmup: float | None = None) -> RateResult:
    """Saturate the bottleneck with TCP flows from every host and count bytes leaving it."""
    max_rtt_s = max(h.rtt_ms for h in net.hosts) / 1000
    # Slow start to a full pipe takes about log2(BDP in packets) RTTs; 15 RTTs covers it with margin.
    warmup = warmup if warmup is not None else max(2.0, 15 * max_rtt_s)
    fill_limit = max(MIN_FILL_LIMIT_S, MAX_FILL_RTTS * max_rtt_s)
    flows_n = max(len(net.hosts), RATE_TEST_FLOWS)
    with net.bottleneck.counters() as counters, LongFlows(net, flows_n) as flows:

        def check() -> None:
            net.check_alive()
            flows.check_processes()

        sleep_checked(warmup, check)
        filled = wait_until_full(counters, net.cfg.rate_mbps * RATE_LOW, fill_limit, check)
        samples = [counters.read()]
        drops0 = net.bottleneck.leaf_drops()
        end = samples[0].t + duration
        while time.monotonic() < end:
            sleep_checked(0.1, check)
            samples.append(counters.read())
        drops = net.bottleneck.leaf_drops() - drops0
        flows.check()  # a flow that died means the bottleneck may not have been saturated
    per_second = [
        rate_mbps(samples[i], samples[min(i + 10, len(samples) - 1)]) for i in range(0, len(samples) - 10, 10)
    ]
    return RateResult(
        net.cfg.rate_mbps,
        rate_mbps(samples[0], samples[-1]),
        samples[-1].t - samples[0].t,
        per_second,
        drops,
        flows_n,
        round(warmup + filled, 2),
    )


def wait_until_full(counters: InterfaceCounters, floor_mbps: float, limit_s: float, check: Callable[[], None]) -> float:
    """Wait until one FILL_WINDOW_S window carries floor_mbps, or limit_s passes; the seconds waited.

    A link that never reaches the floor is measured anyway after the limit: the shortfall is then
    the link's (or the machine's), and the measurement window that follows reports it."""
    t0 = time.monotonic()
    window = [counters.read()]
    while time.monotonic() - t0 < limit_s:
        sleep_checked(0.1, check)
        window.append(counters.read())
        while len(window) > 2 and window[-1].t - window[1].t >= FILL_WINDOW_S:
            window.pop(0)  # keep the shortest window that spans FILL_WINDOW_S
        if window[-1].t - window[0].t >= FILL_WINDOW_S and rate_mbps(window[0], window[-1]) >= floor_mbps:
            break
    return time.monotonic() - t0


def summarize(net: Dumbbell, pings: list[PingResult], rate: RateResult | None) -> dict:
    cfg = net.cfg
    uniform = len(set(cfg.rtt_ms)) == 1
    mins = [p.min_ms for p in pings]
    dl = net.delayline.stats() if net.delayline else {}
    dl_drops = net.delayline.drops() if net.delayline else 0
    ok = all(p.ok for p in pings) and (rate is None or rate.ok) and dl_drops == 0
    return {
        "ok": ok,
        "hosts": cfg.hosts,
        "delay_backend": net.backend,
        "shaper": cfg.shaper,
        "cc": cfg.cc,
        "buffer_bytes": net.buffer_bytes,
        # One RTT for all hosts: scalars (median over hosts); a spread: one value per host.
        "configured_rtt_ms": cfg.rtt_ms[0] if uniform else cfg.rtt_ms,
        "measured_rtt_ms": round(statistics.median(mins), 3) if uniform else [round(m, 3) for m in mins],
        "rtt_tolerance": f"within {RTT_REL_TOL:.0%} + {RTT_ABS_TOL_MS} ms of configured (min of ping)",
        "rtt_ok": all(p.ok for p in pings),
        "per_host": [p.__dict__ | {"ok": p.ok} for p in pings],
        "configured_rate_mbps": cfg.rate_mbps,
        "measured_rate_mbps": round(rate.measured_mbps, 3) if rate else None,
        "rate_ratio": round(rate.ratio, 4) if rate else None,
        "rate_tolerance": f"{RATE_LOW:.0%}..{RATE_HIGH:.0%} of configured",
        "rate_ok": rate.ok if rate else None,
        "rate_per_second_mbps": [round(r, 3) for r in rate.per_second_mbps] if rate else [],
        "bottleneck_drops_during_rate_test": rate.bottleneck_drops if rate else None,
        "rate_test_flows": rate.flows if rate else None,
        "rate_test_warmup_seconds": rate.fill_seconds if rate else None,
        "delayline_drops": dl_drops,
        "delayline": dl,
    }


def run_verify(
    cfg: DumbbellConfig,
    backend: str,
    duration: float,
    rate_test: bool = True,
    out: Path | None = None,
    say: Say | None = None,
) -> dict:
    """`bufsize verify`: build, ping every host, saturate the bottleneck; the summary (and verify.json in out)."""
    check_duration(duration)
    t0 = time.monotonic()
    with Experiment(cfg, backend, "verify", out, say) as ex:
        assert ex.net is not None
        built = time.monotonic() - t0
        # The machine around the measurement, as every run records it: a ping or a rate read while
        # the hypervisor or another program took the CPU may be off for that reason alone.
        cpu, foreign = CpuMonitor().start(), ForeignCpu()
        pings = measure_rtts(ex.net)
        rate = measure_rate(ex.net, duration=duration) if rate_test else None
        share = cpu.stop()
        machine = {"mean_steal_share": round(share.steal, 4), "foreign": foreign.result()}
        summary = summarize(ex.net, pings, rate) | {
            "leftovers_of_dead_runs": ex.leftovers,
            "cpu": machine | {"idle": round(share.idle, 3)},
            "cautions": cautions({"cpu": machine}),
        }
        cfg = ex.cfg  # the shaper resolved (auto names the one that ran)
    summary["build_seconds"] = round(built, 2)
    summary["wall_seconds"] = round(time.monotonic() - t0, 2)
    if out is not None:
        manifest = machine_manifest(backend, cfg.cc, cfg.shaper)
        write_json_atomic(out / "verify.json", summary | {"config": cfg.to_dict(), "manifest": manifest})
    return summary


def format_summary(s: dict) -> str:
    yes = {True: "yes", False: "NO", None: "-"}
    lines = [
        f"{s['hosts']} hosts, {s['configured_rate_mbps']:g} Mb/s {s['shaper']} + bfifo "
        f"({s['buffer_bytes']} B), delay backend {s['delay_backend']}, cc {s['cc']}",
        f"{'host':>6} {'RTT set':>9} {'RTT min':>9} {'avg':>9} {'max':>9}  ok",
    ]
    for p in s["per_host"][:20]:
        lines.append(
            f"{'h' + str(p['host']):>6} {p['configured_ms']:9.3f} {p['min_ms']:9.3f} "
            f"{p['avg_ms']:9.3f} {p['max_ms']:9.3f}  {yes[p['ok']]}"
        )
    if len(s["per_host"]) > 20:
        bad = sum(not p["ok"] for p in s["per_host"])
        lines.append(f"   ... {len(s['per_host']) - 20} more hosts, {bad} outside tolerance in all")
    lines.append(f"RTT tolerance: {s['rtt_tolerance']}")
    if s["measured_rate_mbps"] is not None:
        lines.append(
            f"rate: configured {s['configured_rate_mbps']:g} Mb/s, measured {s['measured_rate_mbps']:.3f} Mb/s "
            f"({s['rate_ratio']:.1%}; allowed {s['rate_tolerance']})  {yes[s['rate_ok']]}"
        )
    if s["delay_backend"] == "delayline":
        lines.append(f"delay line drops: {s['delayline_drops']}")
    lines.append("verify: OK" if s["ok"] else "verify: FAILED (outside tolerance)")
    if s.get("cautions"):
        lines.append(describe_cautions(s["cautions"]))
    return "\n".join(lines)
