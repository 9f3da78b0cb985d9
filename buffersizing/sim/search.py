"""The emulation's search on the simulator twin: same options, same rule, same result keys.

What is the same as buffersizing/longlived/search.py, and taken from there rather than copied: the
median-filtered search (MedianSearch) and its stopping rules, the first guess, the settle and sample
lengths (the model's cycle, or two loss episodes as the bottleneck's drops measure them), the
calibration at two BDPs that defines the reference rate, and utilization as bytes sent by the
bottleneck over the reference rate times the sample length. What differs: time is simulated (a
sample is `run` in ns-3, not a wait), so there is no CPU, pacing-fidelity or leftover check; the
run is deterministic for a seed, and a result names the simulator, its version and the seed.
"""

from __future__ import annotations

import math
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from bufsize.longlived.search import (
    CALIBRATION_BDPS,
    FirstGuess,
    Prober,
    SearchOptions,
    answer_fields,
    calibrate,
    check_searchable,
    loss_summary,
    median_search,
    model_guess,
    theory,
    write_samples_csv,
)
from bufsize.scaffold.link import SimulatedLink
from bufsize.scaffold.manifest import project_commit
from bufsize.scaffold.resultdir import write_json_atomic
from bufsize.scaffold.schema import stamp
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.errors import UsageError
from bufsize.topologies.nssim import HELPER, NS3_WHEEL, SimConfig, SimDumbbell, ns3_version
from bufsize.topologies.safefiles import make_dirs
from bufsize.topologies.units import digits

# Simulated seconds the warm-up may be extended while flows are still starting (SYN backoff 1+2+4+8+16).
MAX_START_S = 31.0
GOOD_REFERENCE = 0.97  # as the emulation's flag (experiment.GOOD_REFERENCE): a simulated link reaches 1.0


def validate(cfg: SimConfig, opts: SearchOptions) -> None:
    """The emulated search's checks, with the twin's own limit on N (not the 800 flows one machine
    can emulate)."""
    cfg.validate(opts.flows)
    opts.validate_rule()
    check_searchable(cfg, opts.flows)  # type: ignore[arg-type]


RTO_TEXT = {"linux": "srtt + max(4 rttvar, 200 ms)", "ns2": "max(1 s, srtt + 4 rttvar), 10 ms tick (ns-2's)"}


def simulator_manifest(cfg: SimConfig) -> dict:
    acks = "delayed ACK 2 segments or 40 ms" if cfg.delayed_ack else "every segment ACKed at once"
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "host": platform.node(),
        "python": platform.python_version(),
        "simulator": "ns-3",
        "ns3_version": ns3_version(),
        "ns3_wheel": NS3_WHEEL,
        "helper": HELPER.name,
        "seed": cfg.seed,
        "congestion_control": cfg.cc,
        "tcp": f"ns-3 TcpLinuxReno/TcpCubic/TcpBbr; SACK, timestamps, window scaling, IW {cfg.iw}, {acks}, PRR, "
        f"RTO {RTO_TEXT[cfg.rto]}; 1448-byte segments; "
        + ("every flow paced (1.2 x cwnd/rtt, at most the access rate)" if cfg.sender_pacing else "unpaced but BBR"),
        "project_commit": project_commit(),
    }


START_BUFFERS = ("calibration", "small")


def check_start_buffer(choice: str) -> None:
    """--start-buffer: calibration, small, or a whole number of packets from 1."""
    if choice not in START_BUFFERS and not (digits(choice) and 1 <= int(choice) <= 10_000_000):
        raise UsageError(f"--start-buffer {choice}: calibration, small, or packets from 1 to 10000000")


def start_packets(choice: str, cal_packets: int, small_packets: int, flows: int) -> int:
    """The buffer the flows start at, never above the calibration buffer. Their slow start
    overshoots whatever it is; with a buffer of 2 BDP at 1 Gb/s that overshoot drops tens of
    thousands of packets at once, and ns-3's SACK bookkeeping recovers a window of W packets in W^2
    (docs/twin.md), so a large run starts small and lets congestion avoidance grow the windows into
    the calibration buffer instead. `small` is `small_packets` (the first probe, or the measured
    buffer) but at least one packet per flow: 800 flows started at 8 packets lost so many SYNs and
    first windows that some were not up after 31 s (bench/results/start-buffer/README.md)."""
    if choice == "calibration":
        return cal_packets
    if choice == "small":
        return min(max(small_packets, flows), cal_packets)
    return min(int(choice), cal_packets)


def hold_until_up(net: SimDumbbell, flows: int, warm_s: float) -> int:
    """Run fresh flows for `warm_s`, longer while any is not up (a SYN lost among hundreds of flows
    starting within a second costs a flow 1 s, then 2, 4, ...), as the emulation holds its flows;
    the late flows then get a warm-up of their own. How many came up."""
    net.run(warm_s)
    up = net.flows_up()
    while up < flows and net.sim_seconds < warm_s + MAX_START_S:
        net.run(1.0)
        up = net.flows_up()
    if net.sim_seconds > warm_s:
        net.run(warm_s)
    return up


def warm_up(net: SimDumbbell, prober: Prober, flows: int, cal_packets: int, say: Callable[[str], None]) -> int:
    """Run the flows until every one is up and warm, then grow them into the calibration buffer where
    they started below it; how many came up."""
    start = net.buffer_packets
    up = hold_until_up(net, flows, prober.timing(net.buffer_bytes).warmup_s)
    say(f"  {up} of {flows} flows up after {net.sim_seconds:.1f} s at {start} packets")
    if start != cal_packets:
        net.set_buffer(cal_packets)
        grow = prober.timing(net.buffer_bytes).warmup_s
        net.run(grow)
        say(f"  {grow:.1f} s at the {cal_packets}-packet calibration buffer, to {net.sim_seconds:.1f} s")
    return up


FRESH_SEED_STRIDE = 100_003  # a prime: the k-th fresh start of seed s is far from any other search's seed


class FreshLink(SimulatedLink):
    """The twin with its flows started afresh at each buffer a probe moves to, as a simulation that
    measures every buffer in a run of its own: a new simulator at that buffer, its flows held until
    all are up and warm as at the start; the probe's settle and samples follow as on the running twin
    (a re-check at the same buffer goes on in that run). Each start has a seed of its own, derived
    from the search's: with the same seed a re-check after another buffer would replay its first run."""

    def __init__(self, net: SimDumbbell, warm_s: Callable[[int], float]) -> None:
        super().__init__(net)
        self.warm_s = warm_s  # the warm-up at a buffer of so many bytes
        self.earlier_s = 0.0  # simulated in the runs before this one
        self.starts = 1
        self.all_up = True

    def set_buffer_bytes(self, buffer_bytes: int) -> None:
        self.earlier_s += self.net.sim_seconds
        self.net.close()
        seed = (self.cfg.seed - 1 + FRESH_SEED_STRIDE * self.starts) % 2**31 + 1
        self.net = SimDumbbell(replace(self.cfg, seed=seed), self.net.flows, buffer_bytes // FRAME_BYTES).__enter__()
        self.starts += 1
        self.all_up &= hold_until_up(self.net, self.net.flows, self.warm_s(buffer_bytes)) == self.net.flows


def run_sim_search(
    cfg: SimConfig,
    opts: SearchOptions,
    out: Path | None = None,
    say: Callable[[str], None] = print,
    hint: FirstGuess | None = None,
    start_buffer: str = "calibration",
    fresh_starts: bool = False,
) -> dict:
    """One search on the twin, end to end; with `out`, result.json and samples.csv are written there.
    The flows start at `start_buffer` (START_BUFFERS, or packets) and are calibrated at 2 BDP; with
    `fresh_starts`, every buffer probed is measured in a run of its own (FreshLink). One function, as
    the emulated `run_search` is: the warm-up, calibration and search share one live simulation, and
    the result is built from all three."""
    validate(cfg, opts)
    check_start_buffer(start_buffer)
    th = theory(cfg, opts.flows)  # type: ignore[arg-type]
    cal_packets = math.ceil(CALIBRATION_BDPS * cfg.bdp_bytes / FRAME_BYTES)
    guess = hint or model_guess(cfg, opts.flows, th)  # type: ignore[arg-type]
    first = guess if opts.first_guess else None
    start = start_packets(start_buffer, cal_packets, guess.packets, opts.flows)
    t_wall = time.monotonic()
    say(
        f"sim search: {opts.flows} flows over {cfg.hosts} hosts, {cfg.rate_mbps:g} Mb/s, RTT {max(cfg.rtt_ms):g} ms, "
        f"cc {cfg.cc}, seed {cfg.seed}, target {opts.target:.1%} of the {opts.relative_to} rate; "
        f"BDP {th['bdp_packets']:.0f} packets, RTT*C/sqrt(N) {th['theory_sqrt_n_packets']:.1f} (ns-3 {ns3_version()})"
    )
    if start != cal_packets:
        say(
            f"  the flows start at {start} packets ({start_buffer}), not the {cal_packets}-packet calibration buffer: "
            "their slow start overshoots that, and congestion avoidance then grows them into the larger one"
        )
    with SimDumbbell(cfg, opts.flows, start) as net:
        fresh = FreshLink(net, lambda b: prober.timing(b).warmup_s) if fresh_starts else None
        link = fresh or SimulatedLink(net)
        prober = Prober(link, opts, cfg.rate_mbps)
        up = warm_up(net, prober, opts.flows, cal_packets, say)
        cal_rates = calibrate(prober, cfg.rate_mbps, max(10, 2 * opts.samples), say)
        reference = statistics.median(cal_rates)
        prober.denominator = reference if opts.relative_to == "reference" else cfg.rate_mbps
        top = min(cal_packets, opts.max_buffer_packets or cal_packets)
        if first:
            say(f"  first probe at {first.packets} packets: {first.source}")
        try:
            res = median_search(prober, opts, top, cal_packets, first, say).run()
        finally:
            link.net.close()  # a fresh start's simulator (the first is closed by the with)
        sim_seconds = link.net.sim_seconds + (fresh.earlier_s if fresh else 0.0)

    answer = res.buffer_packets
    flags = {
        "converged": res.converged,
        "answer_below_search_top": answer < top,
        "reference_near_nominal": reference >= GOOD_REFERENCE * cfg.rate_mbps,
        "flows_held_until_all_up": up == opts.flows and (fresh is None or fresh.all_up),
    }
    result = {
        "kind": "sim-search",
        "flows": opts.flows,
        "hosts": cfg.hosts,
        "cc": cfg.cc,
        "seed": cfg.seed,
        "nominal_rate_mbps": cfg.rate_mbps,
        "reference_rate_mbps": round(reference, 3),
        **answer_fields(
            res, opts, th, cal_packets, top, first, loss_summary(prober, answer), cal_rates, prober.measurements
        ),  # fmt: skip
        "queue_at_answer": next((m.queue for m in reversed(prober.measurements) if m.buffer_packets == answer), None),
        "start_buffer": start_buffer,
        "start_buffer_packets": start,
        "fresh_starts": fresh.starts if fresh else 0,  # simulator runs when each buffer starts afresh; 0: one run
        "valid": all(v is not False for v in flags.values()),
        "flags": flags,
        "wall_seconds": round(time.monotonic() - t_wall, 1),
        "simulated_seconds": round(sim_seconds, 1),
        "options": opts.to_dict(),
        "config": cfg.to_dict(),
        "manifest": simulator_manifest(cfg),
    }
    result = stamp(result, "result")  # the same document whether written, printed or returned
    if out is not None:
        make_dirs(out)
        write_samples_csv(out / "samples.csv", prober.measurements)
        write_json_atomic(out / "result.json", result)
    say(
        f"  answer: {answer} packets, {result['ratio_to_theory']}x RTT*C/sqrt(N); "
        f"{'valid' if result['valid'] else 'FLAGGED: ' + ', '.join(k for k, v in flags.items() if v is False)}; "
        f"{sim_seconds:.0f} s simulated in {result['wall_seconds']:.0f} s"
    )
    if result["conditioning"]["ill_conditioned"]:
        say(f"  {result['conditioning']['statement']}")
    return result
