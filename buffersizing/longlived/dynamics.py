"""How long a probe must wait and sample, from the congestion-control dynamics of the configuration.

A probe that settles for 3 s and samples 3 x 1 s (the 2012 search) sees a fraction of one Reno
sawtooth when there are few flows: one flow at 87 ms and 62.5 Mb/s takes 20 to 40 s to climb from
W/2 back to W. Each sample here spans at least one congestion cycle of a flow, so a sample's
utilization is a cycle average rather than a phase of it, and the settle time covers a cycle too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bufsize.theory.ccrules import BETA
from bufsize.topologies import FRAME_BYTES

CUBIC_C = 0.4  # cubic's scaling constant (packets / s^3), as in the kernel
CUBIC_BETA = BETA["cubic"]  # window after a loss, as a fraction of the window before it
# BBR enters ProbeRTT (inflight cut to 4 packets for 200 ms) when its min-RTT estimate is 10 s old, as
# it is under a standing queue (tcp_bbr.c, bbr_min_rtt_win_sec). That dip, not a loss, is its cycle:
# a sample shorter than 10 s holds the dip or not, and its utilization swings with that, not the buffer.
BBR_PROBE_RTT_INTERVAL_S = 10.0


def cycle_seconds(cc: str, flows: int, bdp_packets: float, buffer_packets: float, rtt_s: float) -> float:
    """One congestion cycle (loss to loss) of one of `flows` flows sharing the pipe and buffer."""
    w = max(1.0, (bdp_packets + buffer_packets) / flows)  # a flow's window just before a loss
    if cc in ("cubic", "bic"):
        # Cubic regrows to W in K = cbrt(W (1 - beta) / C) seconds, but never slower than its
        # Reno-friendly estimate, which gains 3(1 - beta)/(1 + beta) packets per RTT.
        k = math.cbrt(w * (1 - CUBIC_BETA) / CUBIC_C)
        friendly = w * (1 - CUBIC_BETA) / (3 * (1 - CUBIC_BETA) / (1 + CUBIC_BETA)) * rtt_s
        return min(k, friendly)
    if cc in ("reno", "highspeed", "scalable", "htcp", "illinois", "vegas", "westwood"):
        return w / 2 * rtt_s  # halve, then one packet per RTT back to W
    if cc == "bbr":
        return BBR_PROBE_RTT_INTERVAL_S
    return 10 * rtt_s  # others: no model here, ten round trips


def sample_floor_s(cc: str) -> float:
    """The shortest sample for `cc`: one ProbeRTT interval for BBR, whose loss episodes (it does not
    back off on a loss) say nothing of its cycle; one second for the others."""
    return BBR_PROBE_RTT_INTERVAL_S if cc == "bbr" else 1.0


def calibration_sample_s(cc: str, rtt_s: float) -> float:
    """A reference sample at 2 BDP: short (10 RTTs) where the queue never empties there, but for BBR
    one ProbeRTT interval, since ProbeRTT drains even that queue: the median of 1 s samples leaves
    the dips out, and the reference would read 100 % where probes at the same buffer read 97 %."""
    return max(1.0, 10 * rtt_s, sample_floor_s(cc))


@dataclass(frozen=True)
class Timing:
    settle_s: float  # after a buffer change, before the first sample
    sample_s: float  # length of one utilization sample
    warmup_s: float  # after the flows start, before calibration

    def to_dict(self) -> dict:
        return {k: round(v, 2) for k, v in self.__dict__.items()}


def auto_timing(
    cc: str,
    flows: int,
    rate_mbps: float,
    rtt_ms: float,
    buffer_bytes: float,
    max_sample_s: float = 30.0,
) -> Timing:
    """Settle and sample lengths for probes around `buffer_bytes` (samples at least sample_floor_s)."""
    rtt_s = rtt_ms / 1000
    bdp = rate_mbps * 1e6 / 8 * rtt_s / FRAME_BYTES
    cycle = cycle_seconds(cc, flows, bdp, buffer_bytes / FRAME_BYTES, rtt_s)
    sample = min(max_sample_s, max(sample_floor_s(cc), 20 * rtt_s, cycle))
    settle = min(2 * max_sample_s, max(2.0, 20 * rtt_s, cycle))
    # Slow start fills the pipe in about log2(BDP) round trips; then one cycle at the large buffer.
    warmup = max(3.0, (math.log2(max(2.0, bdp)) + 5) * rtt_s, min(cycle, 2 * max_sample_s))
    return Timing(settle, sample, warmup)


def estimate_search_seconds(
    cc: str, flows: int, rate_mbps: float, rtt_ms: float, samples: int, settle_s: float | None, sample_s: float | None
) -> float:
    """A rough wall time for one search, for ETAs before any point has finished."""
    bdp = rate_mbps * 1e6 / 8 * rtt_ms / 1000 / FRAME_BYTES
    around = max(1.0, bdp / math.sqrt(flows)) * FRAME_BYTES
    t = auto_timing(cc, flows, rate_mbps, rtt_ms, around)
    settle = settle_s if settle_s is not None else t.settle_s
    sample = sample_s if sample_s is not None else t.sample_s
    setup = 3.0 + 0.02 * flows + 1.0 + 4 * rtt_ms / 1000 + 0.01 * flows
    calibration = t.warmup_s + 10 * max(1.0, rtt_ms / 100) + 3.0
    probes = math.log2(max(2.0, 2 * bdp)) + 3  # bisection plus first guess and re-checks
    return setup + calibration + probes * (settle + samples * sample * 1.3)  # 1.3: some probes are extended


# A probe's samples span this many loss episodes of the aggregate. Chosen from
# the committed queue traces re-cut into samples of other lengths (bench/results/sample-length.md): at
# N = 2 a one-episode sample holds a loss dip or not, and a second of two-episode samples was worth 1.5
# times as much. Three were a little better again, within the spread, and untried on the real link.
EPISODES_PER_SAMPLE = 2


@dataclass(frozen=True)
class LossCycle:
    """Loss episodes at the bottleneck over a stretch of the queue trace at one buffer."""

    window_s: float
    episodes: int  # rises of the drop count after at least one bin without a drop
    lossy_bins: int  # bins (of the gap used) that hold a drop

    @property
    def count(self) -> float:
        """Episodes, but at least half the lossy bins: where drops fill most bins (many flows) the
        episodes merge, while the aggregate moves within a few bins (the sample's floor covers it)."""
        return max(self.episodes, self.lossy_bins / 2)

    @property
    def interval_s(self) -> float | None:
        """Mean time between episodes; None without any."""
        return self.window_s / self.count if self.count else None

    def __add__(self, other: LossCycle) -> LossCycle:
        return LossCycle(
            self.window_s + other.window_s, self.episodes + other.episodes, self.lossy_bins + other.lossy_bins
        )


def lossy_bins(times: Sequence[float], drops: Sequence[int], bin_s: float) -> dict[int, int]:
    """Each bin of `bin_s` from times[0] that holds a drop, and the index of its first drop."""
    first: dict[int, int] = {}
    for i in range(1, len(times)):
        if drops[i] > drops[i - 1]:
            first.setdefault(int((times[i] - times[0]) / bin_s), i)
    return first


def episode_starts(times: Sequence[float], drops: Sequence[int], bin_s: float) -> list[int]:
    """The index of each episode's first drop: a lossy bin after a bin without a drop starts one."""
    bins = lossy_bins(times, drops, bin_s)
    return [i for b, i in sorted(bins.items()) if b - 1 not in bins]


def loss_cycle(times: Sequence[float], drops: Sequence[int], bin_s: float) -> LossCycle:
    """Episodes in a trace of cumulative drops: a bin of `bin_s` (two RTTs: a flow's loss episode
    lasts about one) with a drop, after a bin without one, starts an episode."""
    if len(times) < 2:
        return LossCycle(0.0, 0, 0)
    bins = lossy_bins(times, drops, bin_s)
    return LossCycle(times[-1] - times[0], sum(1 for b in bins if b - 1 not in bins), len(bins))


def episode_interval(
    seen: Sequence[tuple[float, LossCycle]],
    model_cycle: Callable[[float], float],
    at_packets: float,
    min_episodes: float = 4,
) -> float | None:
    """Time between loss episodes at a buffer of `at_packets`, from the episodes `seen` at every buffer
    (packets, episodes) so far; None before `min_episodes`. The model's cycle gives how the interval
    grows with the buffer, the trace its scale: a ratio estimate pooled over all buffers, so a probe at
    a new buffer needs no episodes of its own."""
    count = sum(c.count for _, c in seen)
    if count < min_episodes:
        return None
    return sum(c.window_s / model_cycle(b) for b, c in seen) / count * model_cycle(at_packets)


def measured_sample_s(interval_s: float, rtt_s: float, max_sample_s: float, min_sample_s: float = 1.0) -> float:
    """A sample spanning EPISODES_PER_SAMPLE loss episodes, within auto_timing's bounds."""
    return min(max_sample_s, max(min_sample_s, 20 * rtt_s, EPISODES_PER_SAMPLE * interval_s))
