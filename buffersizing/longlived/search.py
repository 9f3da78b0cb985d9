"""The smallest bottleneck buffer that keeps the link at the target utilization, on a real emulated link.

One experiment: build the dumbbell with a calibration buffer of two bandwidth-delay products, start
N long-lived flows, measure the reference rate (median of many samples; the link cannot do better
than this), then run MedianSearch (buffersizing/longlived/median_search.py) with probes that change the bfifo limit in
place, wait a settle time scaled to the congestion-control dynamics, and sample utilization from
the bottleneck's interface counters. Everything is recorded: every sample of every probe, drops
everywhere on the path, CPU, and the link's pacing fidelity.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bufsize.longlived.conditioning import conditioning
from bufsize.longlived.dynamics import (
    EPISODES_PER_SAMPLE,
    LossCycle,
    Timing,
    auto_timing,
    calibration_sample_s,
    cycle_seconds,
    episode_interval,
    loss_cycle,
    measured_sample_s,
    sample_floor_s,
)
from bufsize.longlived.median_search import MedianSearch, Probe, SearchResult
from bufsize.monitors.cpu import SAMPLE_STEAL_LIMIT, steal_note
from bufsize.monitors.recorder import queue_stats
from bufsize.monitors.tcpstats import recovery_shares
from bufsize.scaffold.cautions import describe as describe_cautions
from bufsize.scaffold.experiment import MAX_WAIT_S, MIN_SAMPLE_S, check_fidelity_s
from bufsize.scaffold.link import LinkSpec, SampledLink, Taken
from bufsize.scaffold.runs import OnLink
from bufsize.theory.ccrules import rule_for
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.delay import line_lost_share
from bufsize.topologies.errors import RunError, UsageError
from bufsize.topologies.safefiles import atomic_text
from bufsize.topologies.units import check_number

CALIBRATION_BDPS = 2  # calibration buffer, in bandwidth-delay products
# Calibration takes half its samples, and the rest only if those differ by more than this share: at
# two BDPs the queue never empties, so the first half usually agrees to 0.01 %.
CALIBRATION_AGREE = 0.002
MIN_REFERENCE = 0.90  # of the nominal rate: below this the emulation cannot carry the configuration
RELATIVE_TO = ("reference", "nominal")
# How long a sample is without --sample-s: spanning two loss episodes as the queue trace measures them
# (a cycle long enough for the flows' real dynamics), or one congestion cycle of the model (the sign-test rule).
SAMPLE_LENGTHS = ("measured", "model")
MIN_EPISODES = 4  # before this many, the model's cycle sets the sample length
# A measurement retakes at most this many times its samples where the hypervisor took CPU during them
# (--max-sample-steal): on a machine that stays stolen the search goes on, with the least-stolen
# samples and a count of them in the result, instead of waiting for a quiet that may not come.
STEAL_RETAKES = 2
# The line shaper loses link time for good when it wakes later than its catch-up allowance; where the
# queue never empties, a measurement's shortfall from full utilization equals that time (Pearson r
# 0.96 over 300 such Fig 11 measurements, bench/results/line-lost-capacity.md). A search whose median
# measurement lost more than this share of what its target leaves (1 - target) is flagged
# `line_kept_time`: its answer then measures the machine as much as the buffer (99.9 % on 2 cores).
LINE_LOST_SHARE_OF_SLACK = 0.5


@dataclass
class SearchOptions:
    flows: int
    target: float = 0.99
    relative_to: str = "reference"
    samples: int = 5
    settle_s: float | None = None  # None: scaled to the dynamics at each probe's buffer
    sample_s: float | None = None
    max_sample_s: float = 30.0
    sample_length: str = "measured"  # SAMPLE_LENGTHS; --sample-s overrides it
    resolution: float = 0.05
    # > samples: the sequential sign test (median_search.sign_test) takes more samples, up to this many
    # per probe, until the verdict is established at `alpha`; 0 keeps a fixed count per probe.
    max_samples: int = 0
    alpha: float = 0.05
    # > 0: the precision rule (median_search.MedianSearch.precision): stop when the crossing of the
    # target, fitted to every sample so far, is known to within +- this share at `level`.
    precision: float = 0.0
    level: float = 0.9
    max_buffer_packets: int | None = None  # top of the search (2012's --maxq); None: the calibration buffer
    first_guess: bool = True
    tool: str = "iperf"
    fidelity_s: float = 2.0  # 0 skips the fidelity trace
    # > 0: a sample during which the hypervisor took more than this share of all CPU time is retaken
    # (monitors/rate.quiet_samples); 0 keeps every sample.
    max_sample_steal: float = SAMPLE_STEAL_LIMIT

    def validate_rule(self) -> None:
        """The options of the search itself, whatever runs it (the emulation or the twin)."""
        check_number("--target", self.target, 0.5, 1.0)
        if self.relative_to not in RELATIVE_TO:
            raise UsageError(f"--relative-to {self.relative_to}: must be one of {', '.join(RELATIVE_TO)}")
        if not 1 <= self.samples <= 100:
            raise UsageError(f"--samples {self.samples}: must be from 1 to 100")
        if self.settle_s is not None:
            check_number("--settle-s", self.settle_s, 0, MAX_WAIT_S)
        if self.sample_s is not None:
            check_number("--sample-s", self.sample_s, MIN_SAMPLE_S, MAX_WAIT_S, lo_inclusive=True)
        if self.sample_length not in SAMPLE_LENGTHS:
            raise UsageError(f"--sample-length {self.sample_length}: must be one of {', '.join(SAMPLE_LENGTHS)}")
        check_number("--resolution", self.resolution, 0, 0.5, lo_inclusive=True)
        if self.max_samples and not self.samples < self.max_samples <= 200:
            raise UsageError(f"--max-samples {self.max_samples}: must be 0 (fixed count) or from --samples + 1 to 200")
        # Below 0.001 a sign test needs more than 10 samples all on one side before any verdict.
        check_number("--alpha", self.alpha, 0.001, 0.5, lo_inclusive=True)
        if self.precision:
            check_number("--precision", self.precision, 0.01, 0.5, lo_inclusive=True)
            if self.max_samples:
                raise UsageError("--precision replaces the sequential test: drop --max-samples (or --precision)")
        check_number("--level", self.level, 0.5, 0.999, lo_inclusive=True)
        if self.max_buffer_packets is not None and not 1 <= self.max_buffer_packets <= 1_000_000:
            raise UsageError(f"--max-buffer-packets {self.max_buffer_packets}: must be from 1 to 1000000")
        check_fidelity_s(self.fidelity_s)
        check_number("--max-sample-steal", self.max_sample_steal, 0, 0.5, lo_inclusive=True)

    def to_dict(self) -> dict:
        return asdict(self)


def stopping_rule(opts: SearchOptions) -> str:
    """How the search decided when it knew enough: the result says which rule answered."""
    if opts.precision:
        return "precision"
    return "sign test" if opts.max_samples > opts.samples else "fixed samples"


def sample_rule(opts: SearchOptions) -> str:
    """How long each sample was, in words, for the run's log and its result."""
    if opts.sample_s is not None:
        return f"fixed at {opts.sample_s:g} s (--sample-s)"
    if opts.sample_length == "model":
        return "one congestion cycle of the model (dynamics.cycle_seconds)"
    return (
        f"{EPISODES_PER_SAMPLE} loss episodes as the queue trace measures them (the model's cycle until "
        f"{MIN_EPISODES} are seen)"
    )


def steal_rule(opts: SearchOptions) -> str:
    """Which samples count, in words, for the run's log and its result."""
    if opts.max_sample_steal <= 0:
        return "every sample counts"
    return (
        f"a sample during which the hypervisor took over {opts.max_sample_steal:.1%} of the CPUs is retaken, "
        f"up to {STEAL_RETAKES} x the samples of a measurement; then the least-stolen count"
    )


def default_samples(precision: float) -> int:
    """Samples per probe when none are asked for: the precision rule was tuned with 3 (its fit pools
    every probe's samples; bench/results/search-rule-offline.md), the others use 5."""
    return 3 if precision else 5


def check_searchable(cfg: LinkSpec, flows: int) -> None:
    """Refuse links on which the search cannot mean anything, before anything is built.

    Two lower bounds, both about the link's pipe (RTT x C at the longest RTT) against N:
    - RTT*C/sqrt(N) must be at least one packet: the answer is a whole number of packets (at least
      one), it is reported against that figure (a ratio) and the first probe is a share of it.
    - the pipe plus the calibration buffer (3 BDP) must hold at least one packet per flow: a TCP
      window never drops below one packet, so with less even the search's top buffer leaves flows
      sitting in retransmission timeouts and the reference rate measures timers, not the link.
      The paper's hardest point (800 flows, 62.5 Mb/s, 87 ms: 449 packets) holds 1.7 per flow.
    """
    bdp = cfg.bdp_bytes / FRAME_BYTES
    rtt = max(cfg.rtt_ms)
    link = f"--rate-mbps {cfg.rate_mbps:g} with --rtt-ms {rtt:g} and --flows {flows}"
    if rtt == 0:
        raise UsageError(
            f"--rtt-ms 0: search needs a round trip: its calibration buffer is {CALIBRATION_BDPS} x RTT x C "
            "and its answer is judged against RTT*C/sqrt(N), both 0 here"
        )
    if bdp / math.sqrt(flows) < 1:
        raise UsageError(
            f"{link}: RTT*C/sqrt(N) is {bdp / math.sqrt(flows):.2g} packets, under the one packet a search can "
            "answer; raise --rate-mbps or --rtt-ms, or lower --flows"
        )
    if (CALIBRATION_BDPS + 1) * bdp < flows:
        raise UsageError(
            f"{link}: the pipe and the {CALIBRATION_BDPS}-BDP calibration buffer hold "
            f"{(CALIBRATION_BDPS + 1) * bdp:.0f} packets, fewer than one per flow, so flows would sit in "
            "timeouts even at the top of the search; raise --rate-mbps or --rtt-ms, or lower --flows"
        )


def theory(cfg: LinkSpec, flows: int) -> dict:
    """RTT*C/sqrt(N) as Appenzeller 2004 defines it: with spread RTTs the pipe is C times the mean RTT (the
    sum of windows is compared with it, as util-table does). The calibration buffer is still sized at
    the largest RTT (CALIBRATION_BDPS x cfg.bdp_bytes), so every flow's pipe is covered."""
    rtt = statistics.fmean(cfg.rtt_ms)
    bdp = cfg.rate_mbps * 1e6 / 8 * rtt / 1000 / FRAME_BYTES
    return {
        "bdp_packets": round(bdp, 1),
        "theory_sqrt_n_packets": round(bdp / math.sqrt(flows), 1),
        "rtt_ms_for_theory": round(rtt, 3),
        "rtt_ms_largest": max(cfg.rtt_ms),
    }


@dataclass(frozen=True)
class FirstGuess:
    """The buffer probed first, and where it came from (written to the result)."""

    packets: int
    source: str

    def to_dict(self) -> dict:
        return {"packets": self.packets, "from": self.source}


def model_guess(cfg: LinkSpec, flows: int, th: dict) -> FirstGuess:
    """The rule for the congestion control in use (theory/ccrules.py): for cubic about half of
    RTT*C/sqrt(N), nearer its committed answers (0.24-0.44 of it) than Reno's rule; Reno's rule for a
    congestion control without one of its own."""
    try:
        rule = rule_for(cfg.cc)
    except ValueError:
        return FirstGuess(max(1, round(th["theory_sqrt_n_packets"])), f"RTT*C/sqrt(N) (no rule for {cfg.cc})")
    packets = max(1, round(rule.packets(th["bdp_packets"], flows)))
    if flows == 1:
        return FirstGuess(packets, f"the {cfg.cc} rule for one flow")
    return FirstGuess(packets, f"the {cfg.cc} rule, {rule.many_flows_factor:.2f} x RTT*C/sqrt(N)")


@dataclass
class Measurement:
    """One call of the search's measure(): settle (if the buffer changed), then samples."""

    buffer_packets: int
    t_start: float
    settle_s: float
    sample_s: float
    rates_mbps: list[float]
    utilization: list[float]
    bottleneck_drops: int
    packets_sent: int
    cpu: dict = field(default_factory=dict)
    queue: dict = field(default_factory=dict)  # backlog while sampling (monitors/recorder.py)
    tcp: dict = field(default_factory=dict)  # senders' loss-recovery counters while sampling (monitors/tcpstats.py)
    # The delay line's timekeeping while sampling (delay.timing_between; empty under netem).
    delay_line: dict = field(default_factory=dict)
    # The hypervisor's share of all CPU time during each kept sample, and the samples set aside for it
    # ([rate Mb/s, steal], --max-sample-steal); the counts and cpu above span both.
    sample_steal: list[float] = field(default_factory=list)
    set_aside: list[list[float]] = field(default_factory=list)

    @property
    def loss_rate(self) -> float:
        return self.bottleneck_drops / max(1, self.packets_sent + self.bottleneck_drops)


def probe_timing(cfg: LinkSpec, opts: SearchOptions, buffer_bytes: float, interval_s: float | None) -> Timing:
    """A probe's settle and sample time: the model's cycle at this buffer (auto_timing), the sample
    spanning measured loss episodes once `interval_s` between them is known, and the user's own
    --settle-s and --sample-s over both. One rule for every link."""
    rtt_ms = max(cfg.rtt_ms)
    auto = auto_timing(cfg.cc, opts.flows, cfg.rate_mbps, rtt_ms, buffer_bytes, max_sample_s=opts.max_sample_s)
    sample_s = auto.sample_s
    if interval_s is not None:
        sample_s = measured_sample_s(interval_s, rtt_ms / 1000, opts.max_sample_s, sample_floor_s(cfg.cc))
    return Timing(
        opts.settle_s if opts.settle_s is not None else auto.settle_s,
        opts.sample_s if opts.sample_s is not None else sample_s,
        auto.warmup_s,
    )


class Prober:
    """measure(buffer_bytes, n) for MedianSearch, on a link whose flows are running (emulated or simulated:
    scaffold/link.py); it keeps every measurement and the loss episodes the samples saw."""

    def __init__(self, link: SampledLink, opts: SearchOptions, denominator_mbps: float) -> None:
        self.link, self.opts = link, opts
        self.denominator = denominator_mbps
        self.measurements: list[Measurement] = []
        self.loss: list[tuple[float, LossCycle]] = []  # (buffer packets, loss episodes) of each sampled stretch
        self.set_aside = 0  # samples retaken for steal so far (the progress line shows each probe's)
        self.windows: list[tuple[float, float] | None] = []  # of each measurement's samples, where the link has one

    def model_cycle(self, buffer_packets: float) -> float:
        cfg = self.link.cfg
        rtt_s = max(cfg.rtt_ms) / 1000
        return cycle_seconds(cfg.cc, self.opts.flows, cfg.bdp_bytes / FRAME_BYTES, buffer_packets, rtt_s)

    def observe(self, buffer_packets: float, taken: Taken) -> None:
        """Count the loss episodes in what a take traced."""
        rtt_s = max(self.link.cfg.rtt_ms) / 1000
        for times, drops in taken.drop_traces:
            self.loss.append((buffer_packets, loss_cycle(times, drops, 2 * rtt_s)))

    def episode_interval(self, buffer_packets: float) -> float | None:
        return episode_interval(self.loss, self.model_cycle, buffer_packets, MIN_EPISODES)

    def timing(self, buffer_bytes: float) -> Timing:
        interval = self.episode_interval(buffer_bytes / FRAME_BYTES) if self.opts.sample_length == "measured" else None
        return probe_timing(self.link.cfg, self.opts, buffer_bytes, interval)

    def rates(self, n: int, sample_s: float) -> list[float]:
        """n back-to-back samples of the bottleneck's rate in Mb/s, their loss episodes counted."""
        taken = self.link.take(n, sample_s)
        self.observe(self.link.buffer_bytes / FRAME_BYTES, taken)
        return taken.rates_mbps

    def measure(self, buffer_bytes: int, n: int) -> list[float]:
        timing = self.timing(buffer_bytes)
        settle = 0.0
        if buffer_bytes != self.link.buffer_bytes:
            self.link.set_buffer_bytes(buffer_bytes)
            settle = timing.settle_s
            self.link.wait(settle)
        got = self.link.take(n, timing.sample_s, self.opts.max_sample_steal, STEAL_RETAKES * n)
        self.set_aside += len(got.set_aside)
        self.windows.append(got.window)
        self.observe(buffer_bytes / FRAME_BYTES, got)
        m = Measurement(
            buffer_bytes // FRAME_BYTES,
            round(got.t_start, 3),
            round(settle, 2),
            round(timing.sample_s, 2),
            [round(r, 4) for r in got.rates_mbps],
            [round(r / self.denominator, 5) for r in got.rates_mbps],
            got.drops,
            got.packets_sent,
            got.cpu,
            got.queue,
            tcp=got.tcp,
            delay_line=got.delay_line,
            sample_steal=[round(x, 4) for x in got.steal],
            set_aside=[[round(r, 4), round(x, 4)] for r, x in got.set_aside],
        )
        self.measurements.append(m)
        return m.utilization


def calibrate(prober: Prober, nominal_mbps: float, samples: int, log: Callable[[str], None]) -> list[float]:
    """Median of up to `samples` samples at the calibration buffer (half, where those agree); tried again
    on a link that can recover (the emulation), then refused, if far below nominal."""
    link = prober.link
    sample_s = calibration_sample_s(link.cfg.cc, max(link.cfg.rtt_ms) / 1000)
    tried: list[float] = []
    for attempt in range(link.calibration_attempts):
        rates = prober.rates(samples // 2, sample_s)
        if max(rates) - min(rates) > CALIBRATION_AGREE * statistics.median(rates):
            rates += prober.rates(samples - samples // 2, sample_s)
        ref = statistics.median(rates)
        tried.append(round(ref, 3))
        log(f"  reference rate {ref:.2f} Mb/s ({ref / nominal_mbps:.1%} of {nominal_mbps:g}) from {len(rates)} samples")
        if ref >= MIN_REFERENCE * nominal_mbps:
            return rates
        if attempt < link.calibration_attempts - 1:
            link.wait(prober.timing(link.buffer_bytes).warmup_s)
    raise RunError(
        f"the link never carried {MIN_REFERENCE:.0%} of its {nominal_mbps:g} Mb/s with a {CALIBRATION_BDPS}-BDP buffer "
        f"(medians {', '.join(map(str, tried))} Mb/s): {link.calibration_shortfall}"
    )


def median_search(
    prober: Prober,
    opts: SearchOptions,
    top: int,
    cal_packets: int,
    first: FirstGuess | None,
    say: Callable[[str], None],
) -> MedianSearch:
    """The median-filtered search on `prober`'s link, printing a line per probe; run() it."""
    search: MedianSearch | None = None
    aside_before = [0]

    def progress(p: Probe) -> None:
        verdict = "pass" if p.passed else "fail"
        extra = " (re-check)" if p.recheck else ""
        last = prober.measurements[-1] if prober.measurements else None
        q = last.queue if last else {}
        backlog = f", queue mean {q['mean_packets']:.0f} max {q['max_packets']}" if "mean_packets" in q else ""
        c = search.crossing() if search and opts.precision else None
        low, high = c.interval(search.hi_packets) if c and search else (0.0, 0.0)
        where = f"; crossing {c.packets:.1f} ({low:.1f}..{high:.1f})" if c else ""
        noted = prober.link.probe_note(last) if last else ""
        aside, aside_before[0] = prober.set_aside - aside_before[0], prober.set_aside
        retaken = f", {aside} retaken: hypervisor steal" if aside else ""
        say(
            f"  probe {len(search.probes) if search else 0:2d}: {p.buffer_packets:5d} packets -> median "
            f"{p.median:.2%} {verdict}{extra}{backlog}{noted} [{len(p.samples)} samples{retaken}, "
            f"{prober.link.clock_text()}{where}]"
        )

    search = MedianSearch(
        prober.measure,
        target=opts.target,
        hi_packets=top,
        samples=opts.samples,
        first_guess_packets=first.packets if first else None,
        # The calibration buffer defines the reference rate: it passes by definition.
        assume_hi_passes=opts.relative_to == "reference" and top == cal_packets,
        resolution=opts.resolution,
        sequential=opts.max_samples > opts.samples,
        alpha=opts.alpha,
        max_samples=max(opts.max_samples, opts.samples),
        precision=opts.precision,
        level=opts.level,
        progress=progress,
    )
    return search


def loss_summary(prober: Prober, answer_packets: int) -> dict:
    """The loss episodes the samples saw, and the interval between them the trace gives at the answer."""
    interval = episode_interval(prober.loss, prober.model_cycle, answer_packets, min_episodes=1)
    return {
        "seen": round(sum(c.count for _, c in prober.loss), 1),
        "seconds_traced": round(sum(c.window_s for _, c in prober.loss), 1),
        "interval_s_at_answer": round(interval, 3) if interval is not None else None,
    }


def line_lost_limit(target: float) -> float:
    """The share of its time the line may lose in a search's median measurement (line_kept_time)."""
    return LINE_LOST_SHARE_OF_SLACK * (1 - target)


def line_time(measurements: Sequence[Measurement], target: float) -> dict | None:
    """The share of its time the line shaper lost over a search's measurements (median and largest)
    against the limit of its `line_kept_time` flag; None where no measurement recorded it (HTB, TBF,
    netem's delay, the twin)."""
    shares = [x for m in measurements if (x := line_lost_share(m.delay_line)) is not None]
    if not shares:
        return None
    return {
        "median_share_lost": round(statistics.median(shares), 6),
        "max_share_lost": round(max(shares), 6),
        "limit": round(line_lost_limit(target), 6),
    }


def lost_note(m: Measurement, target: float) -> str:
    """', line lost 0.41% of its time' for a probe's measurement past the line_kept_time limit."""
    share = line_lost_share(m.delay_line)
    return f", line lost {share:.2%} of its time" if share is not None and share > line_lost_limit(target) else ""


def answer_fields(
    res: SearchResult,
    opts: SearchOptions,
    th: dict,
    cal_packets: int,
    top: int,
    first: FirstGuess | None,
    loss: dict,
    cal_rates: list[float],
    measurements: list[Measurement],
) -> dict:
    """What a search's result says about its answer and how it was reached: the keys the emulated
    search and the ns-3 twin share."""
    answer = res.buffer_packets
    return {
        "buffer_packets": answer,
        "buffer_bytes": answer * FRAME_BYTES,
        "target": opts.target,
        "relative_to": opts.relative_to,
        **th,
        "ratio_to_theory": round(answer / th["theory_sqrt_n_packets"], 3),
        "calibration_buffer_packets": cal_packets,
        "search_top_packets": top,
        "note": res.note,
        "uncertain_interval_packets": list(res.uncertain_interval_packets or ()),
        "first_guess": first.to_dict() if first else None,
        "stopping_rule": stopping_rule(opts),
        "sample_rule": sample_rule(opts),
        "steal_rule": steal_rule(opts),
        "samples_set_aside_for_steal": sum(len(m.set_aside) for m in measurements),
        "samples_kept_over_steal_limit": sum(
            1 for m in measurements for x in m.sample_steal if opts.max_sample_steal and x > opts.max_sample_steal
        ),
        "loss_episodes": loss,
        "crossing": res.crossing.to_dict() if res.crossing else None,
        "conditioning": conditioning(res.probes, opts.target, answer, opts.precision or opts.resolution, opts.level),
        "calibration_rates_mbps": [round(r, 3) for r in cal_rates],
        "loss_rate_at_answer": next(
            (round(m.loss_rate, 6) for m in reversed(measurements) if m.buffer_packets == answer), None
        ),
        "tcp_at_answer": tcp_at(answer, measurements),
        "queue_at_answer": next((m.queue for m in reversed(measurements) if m.buffer_packets == answer), None),
        "probes": [asdict(p) for p in res.probes],
        "measurements": [asdict(m) | {"loss_rate": round(m.loss_rate, 6)} for m in measurements],
    }


def tcp_at(buffer_packets: int, measurements: list[Measurement]) -> dict | None:
    """The senders' loss-recovery counters summed over every measurement at this buffer, emulated or
    on the twin (None where none was taken there or none counted)."""
    at = [m.tcp for m in measurements if m.buffer_packets == buffer_packets and m.tcp]
    if not at:
        return None
    total = {k: sum(t.get(k, 0) for t in at) for k in at[0]}
    return total | recovery_shares(total)


def write_samples_csv(path: Path, measurements: list[Measurement]) -> None:
    with atomic_text(path) as f:
        w = csv.writer(f)
        # steal: the hypervisor's share of the CPUs during the sample (empty where not recorded: the twin).
        head = ["measurement", "buffer_packets", "t_start", "settle_s", "sample", "sample_s", "rate_mbps", "util"]
        w.writerow([*head, "steal"])
        for i, m in enumerate(measurements):
            steal = m.sample_steal or [""] * len(m.rates_mbps)
            for j, (r, u, x) in enumerate(zip(m.rates_mbps, m.utilization, steal, strict=True)):
                w.writerow([i, m.buffer_packets, m.t_start, m.settle_s, j, m.sample_s, r, u, x])


def add_machine_fields(fields: dict, measurements: list[Measurement], target: float) -> tuple[dict, float | None]:
    """The line's time lost and the CPU's idle share over the search's measurements, added to
    `fields`; returns the flag they decide (line_kept_time: None where the line was not used) and
    the least idle share, unrounded, for the experiment's own CPU check."""
    idles = [m.cpu["idle"] for m in measurements]
    line = line_time(measurements, target)
    fields["line_time_lost"] = line
    fields["cpu"] = {
        "min_idle_share": round(min(idles), 3) if idles else None,
        "per_measurement": [m.cpu for m in measurements],
    }
    kept = line["median_share_lost"] <= line["limit"] if line else None
    return {"line_kept_time": kept}, (min(idles) if idles else None)


def check_search(cfg: LinkSpec, on: OnLink, opts: SearchOptions) -> None:
    """Every check a search makes of its link and options before anything is built or simulated."""
    on.validate(cfg, opts.flows)
    opts.validate_rule()
    check_searchable(cfg, opts.flows)


def run_search(cfg: LinkSpec, on: OnLink, opts: SearchOptions, hint: FirstGuess | None = None) -> dict:
    """Run one search end to end on the link `on` names (emulated or the twin) and return (and, with
    its `out`, write) its result. `hint`: a first guess from elsewhere (a sweep's earlier points)
    instead of the congestion control's rule. One function because the calibration and the search run
    inside one `with run:` block on the same live link and flows, and the partial record a failure
    saves closes over their state."""
    check_search(cfg, on, opts)
    th = theory(cfg, opts.flows)
    cal_packets = math.ceil(CALIBRATION_BDPS * cfg.bdp_bytes / FRAME_BYTES)
    guess = hint or model_guess(cfg, opts.flows, th)
    run = on.run(cfg, "search", cal_packets * FRAME_BYTES, guess.packets)
    cfg, say = run.cfg, run.say
    say(
        f"{run.label}: {opts.flows} flows over {cfg.hosts} hosts, {cfg.rate_mbps:g} Mb/s, RTT {max(cfg.rtt_ms):g} ms, "
        f"cc {cfg.cc}, target {opts.target:.1%} of the {opts.relative_to} rate; BDP {th['bdp_packets']:.0f} packets, "
        f"RTT*C/sqrt(N) {th['theory_sqrt_n_packets']:.1f}" + run.describe()
    )
    with run:
        notes = lambda m: steal_note(m.cpu) + lost_note(m, opts.target)  # noqa: E731
        link = run.open_link(opts.flows, opts.tool, notes, lambda b: prober.timing(b).warmup_s)
        prober = Prober(link, opts, cfg.rate_mbps)
        say(f"  samples: {sample_rule(opts)}; {steal_rule(opts)}")
        run.write_partial = lambda d: write_samples_csv(d / "samples.csv", prober.measurements)
        cal_rates: list[float] = []
        search: MedianSearch | None = None
        first: FirstGuess | None = None
        run.partial = lambda: {
            "calibration_rates_mbps": [round(r, 3) for r in cal_rates],
            "probes": [asdict(p) for p in search.probes] if search else [],
            "measurements": [asdict(m) for m in prober.measurements],
        }
        try:
            run.warm_up(lambda b: prober.timing(b).warmup_s, f"at {cal_packets} packets")
            cal_rates = calibrate(prober, cfg.rate_mbps, max(10, 2 * opts.samples), say)
            reference = statistics.median(cal_rates)
            run.trace_fidelity(opts.fidelity_s)
            prober.denominator = reference if opts.relative_to == "reference" else cfg.rate_mbps
            top = min(cal_packets, opts.max_buffer_packets or cal_packets)
            first = guess if opts.first_guess else None
            if first:
                say(f"  first probe at {first.packets} packets: {first.source}")
            search = median_search(prober, opts, top, cal_packets, first, say)
            res = search.run()
        finally:
            link.close()

    answer = res.buffer_packets
    if run.recording:
        # The whole recording, read after the run, fills in what the live trace had not yet reached.
        for m, span in zip(prober.measurements, prober.windows, strict=True):
            if span is not None:
                m.queue = queue_stats(run.recording.queue, *span)
    fields = answer_fields(res, opts, th, cal_packets, top, first, loss_summary(prober, answer), cal_rates,
                           prober.measurements)  # fmt: skip
    own_flags: dict[str, bool | None] = {"converged": res.converged, "answer_below_search_top": answer < top}
    cpu_idle_min = None
    if any(m.cpu for m in prober.measurements):  # the machine's own checks, where it has them
        line_flag, cpu_idle_min = add_machine_fields(fields, prober.measurements, opts.target)
        own_flags |= line_flag
    result = run.finish(
        fields,
        own_flags,
        reference_mbps=reference,
        cpu_idle_min=cpu_idle_min,
        options=opts.to_dict(),
        write_extra=lambda d: write_samples_csv(d / "samples.csv", prober.measurements),
    )
    flags = result["flags"]
    say(
        f"  answer: {answer} packets ({answer * FRAME_BYTES} bytes), {result['ratio_to_theory']}x RTT*C/sqrt(N); "
        f"{'valid' if result['valid'] else 'FLAGGED: ' + ', '.join(k for k, v in flags.items() if v is False)}; "
        f"{run.clock_note(result)}"
    )
    if result["conditioning"]["ill_conditioned"]:
        say(f"  {result['conditioning']['statement']}")
    if result.get("cautions"):
        say(f"  {describe_cautions(result['cautions'])}")
    return result
