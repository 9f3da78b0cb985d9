"""Closed-form buffer-sizing models from the seed papers, to set measurements against.

Formula ids (F1..F22) are those of the formula sheet in docs/references.md (Formulas).
Units are in the names: `_packets`, `_s` (seconds), `_bps` (bits/s), `_pps` (packets/s). A "packet"
here is `packet_bytes` long (1500 by default, as in the papers; the testbed's own frames are
FRAME_BYTES = 1514, so pass that when comparing with bufsize measurements). Loads and probabilities
are fractions, not percent.

Everything is pure arithmetic on the standard library, so tests can pin every published number.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import NamedTuple

from bufsize.theory.ccrules import rule_for
from bufsize.theory.ccrules import utilization_bound as ccrule_bound

PACKET_BYTES = 1500

# F7: erf(K * B / ((BDP + B)/sqrt(n))), K = 3*sqrt(3)/(2*sqrt(2)) = 1.837117.
F7_K = 3 * math.sqrt(3) / (2 * math.sqrt(2))
MATHIS_K = 0.87  # F15, F16 (about sqrt(3/4))
MORRIS_K = 0.76  # F17
SHORT_FLOW_PROBABILITIES = (0.01, 0.025, 0.001)  # Fig 12 uses 0.01 (seed legend) or 0.025 (TR text)


# --- Long flows: the two rules (F1, F4) -------------------------------------------------------


def bdp_bits(rtt_s: float, rate_bps: float) -> float:
    """Bandwidth-delay product RTT x C in bits."""
    return rtt_s * rate_bps


def bdp_packets(rtt_s: float, rate_bps: float, packet_bytes: int = PACKET_BYTES) -> float:
    """Bandwidth-delay product RTT x C in packets of `packet_bytes`."""
    return bdp_bits(rtt_s, rate_bps) / (8 * packet_bytes)


def rule_of_thumb_packets(rtt_s: float, rate_bps: float, packet_bytes: int = PACKET_BYTES) -> float:
    """F1: B = RTT x C, the buffer that keeps one flow (or in-phase flows) at full rate."""
    return bdp_packets(rtt_s, rate_bps, packet_bytes)


def stanford_packets(rtt_s: float, rate_bps: float, flows: int, packet_bytes: int = PACKET_BYTES) -> float:
    """F4: B = RTT x C / sqrt(n) for n long-lived, desynchronized flows."""
    return bdp_packets(rtt_s, rate_bps, packet_bytes) / math.sqrt(flows)


def harmonic_mean_rtt_s(rtts_s: Iterable[float]) -> float:
    """F20: the effective RTT of a group of flows is the harmonic mean of their RTTs.

    A flow's rate goes as 1/RTT, so short-RTT flows dominate the aggregate and the mean of rates, not of
    RTTs, is what matters.
    """
    rtts = list(rtts_s)
    if not rtts or min(rtts) <= 0:
        raise ValueError("need one or more positive RTTs")
    return len(rtts) / sum(1 / r for r in rtts)


# --- Long flows: the sum of windows and the Gaussian bound (F6, F7) ----------------------------


def window_sd_packets(mean_window_packets: float) -> float:
    """F6: sd of one sawtooth window, uniform on [2/3 W, 4/3 W]: (2/3 W)/sqrt(12) = W/(3 sqrt 3)."""
    return mean_window_packets / (3 * math.sqrt(3))


def sum_of_windows_sd_packets(buffer_packets: float, bdp_packets: float, flows: int) -> float:
    """F6: upper bound on the sd of the sum of n independent windows, (BDP + B)/(3 sqrt(3) sqrt(n))."""
    # Each mean window is at most (BDP + B)/n; n independent ones add variances.
    return math.sqrt(flows) * window_sd_packets((bdp_packets + buffer_packets) / flows)


def sum_of_windows_normal(buffer_packets: float, bdp_packets: float, flows: int) -> tuple[float, float]:
    """The normal model of the sum of windows behind F7: (mean, sd) in packets.

    F7 is P(BDP <= sum W <= BDP + B) for a normal sum centred in the buffer, at BDP + B/2, with the F6 sd:
    erf(x / (sqrt 2 sd)) with x = B/2 is exactly erf(K B / ((BDP + B)/sqrt n)). Below BDP the link idles,
    above BDP + B packets drop, which is why it bounds utilization from below.
    """
    return bdp_packets + buffer_packets / 2, sum_of_windows_sd_packets(buffer_packets, bdp_packets, flows)


def utilization_lower_bound(buffer_packets: float, bdp_packets: float, flows: int) -> float:
    """F7: Util >= erf(3 sqrt 3/(2 sqrt 2) * B / ((BDP + B)/sqrt n)), as a fraction."""
    if buffer_packets <= 0:
        return 0.0  # the bound says nothing without a buffer (erf(0) = 0)
    return math.erf(F7_K * buffer_packets / ((bdp_packets + buffer_packets) / math.sqrt(flows)))


# --- One flow, or n flows in phase: the fluid sawtooth (F2, F3, F19) ---------------------------
#
# Reno halves the window on a loss and then, with the queue empty, grows it by one packet per RTT of
# 2Tp = BDP/C; once the window passes BDP the queue grows and RTT = W/C, so dW/dt = C/W and W^2 grows
# at 2C (F19). A loss comes when W = BDP + B. n in-phase flows with equal RTTs behave as one window
# (F3) that grows n packets per RTT, which only rescales time.


def _halved_window(buffer_packets: float, bdp_packets: float) -> float:
    return (bdp_packets + buffer_packets) / 2


def _linear_phase_s(buffer_packets: float, bdp_packets: float, rate_pps: float, flows: int) -> float:
    """Time from the halving until the window is back at BDP (zero when B >= BDP: it never drops below)."""
    deficit = max(0.0, bdp_packets - _halved_window(buffer_packets, bdp_packets))
    return deficit * bdp_packets / (flows * rate_pps)  # `deficit` packets at `flows` per RTT of BDP/C


def queue_fill_time_s(buffer_packets: float, bdp_packets: float, rate_pps: float, flows: int = 1) -> float:
    """F19: time for the window to go from BDP to BDP + B (the queue from 0 to B): B^2/(2C) + 2Tp B.

    For B = BDP this is the whole loss-to-loss period, 1.5 B^2/C (App. B: 1.5 * 142^2/1000 = 30.2 s).
    """
    fill = buffer_packets**2 / (2 * rate_pps) + buffer_packets * bdp_packets / rate_pps
    return fill / flows


def sawtooth_period_s(buffer_packets: float, bdp_packets: float, rate_pps: float, flows: int = 1) -> float:
    """Loss-to-loss period of the sawtooth for any B (F19 generalised; equals F19's T when B = BDP)."""
    w_low = _halved_window(buffer_packets, bdp_packets)
    w_high = bdp_packets + buffer_packets
    if w_low >= bdp_packets:  # B >= BDP: the queue never empties, W^2 grows at 2nC the whole cycle
        return (w_high**2 - w_low**2) / (2 * flows * rate_pps)
    return _linear_phase_s(buffer_packets, bdp_packets, rate_pps, flows) + queue_fill_time_s(
        buffer_packets, bdp_packets, rate_pps, flows
    )


def sawtooth_window_packets(
    t_s: float, buffer_packets: float, bdp_packets: float, rate_pps: float, flows: int = 1
) -> float:
    """F19: the (summed) window t seconds after a halving, periodic with sawtooth_period_s.

    With B = BDP this is W(t) = sqrt(2Ct + (2TpC)^2) of F19 (eq 9).
    """
    t = t_s % sawtooth_period_s(buffer_packets, bdp_packets, rate_pps, flows)
    w_low = _halved_window(buffer_packets, bdp_packets)
    linear = _linear_phase_s(buffer_packets, bdp_packets, rate_pps, flows)
    if t < linear:
        return w_low + t * flows * rate_pps / bdp_packets
    w_start = max(w_low, bdp_packets)
    return math.sqrt(2 * flows * rate_pps * (t - linear) + w_start**2)


def sawtooth_queue_packets(
    t_s: float, buffer_packets: float, bdp_packets: float, rate_pps: float, flows: int = 1
) -> float:
    """F5/F19: the queue t seconds after a halving, max(0, W(t) - BDP)."""
    return max(0.0, sawtooth_window_packets(t_s, buffer_packets, bdp_packets, rate_pps, flows) - bdp_packets)


def single_flow_utilization(buffer_packets: float, bdp_packets: float) -> float:
    """Utilization of one Reno flow (or of in-phase flows, F3) with buffer B, from F2/F19.

    With B >= BDP the queue never empties (F2), so 1. With B < BDP, after a loss the window W0 = (BDP + B)/2
    is short of BDP by d = (BDP - B)/2 and climbs back one packet per RTT of 2Tp with the queue empty. In
    that phase the link sends W packets per RTT instead of BDP, so over the d round trips it loses
        sum of (BDP - W) = d^2/2 packets of capacity (W rising linearly from BDP - d to BDP),
    out of C*T = d*BDP (linear phase, d RTTs of BDP/C each) + B^2/2 + B*BDP (F19 fill phase) packets per
    cycle. Utilization = 1 - (d^2/2) / (C*T). B = 0 gives the classic 3/4. The growth rate (and so the
    number of in-phase flows) cancels out.
    """
    if buffer_packets >= bdp_packets:
        return 1.0
    d = (bdp_packets - buffer_packets) / 2
    capacity = d * bdp_packets + buffer_packets**2 / 2 + buffer_packets * bdp_packets
    return 1 - (d * d / 2) / capacity


# --- Short flows: slow-start bursts into an M/G/1 queue (F9-F14) ------------------------------


class BurstMoments(NamedTuple):
    """Raw moments of the burst size X in packets: E[X], E[X^2], E[X^3]."""

    e1: float
    e2: float
    e3: float


def slow_start_bursts(flow_packets: int, iw: int = 2, max_window_packets: int | None = None) -> list[int]:
    """F9: bursts of a flow of `flow_packets` that never leaves slow start: iw, 2iw, 4iw, ..., remainder.

    The paper uses iw = 2 (bursts 2, 4, 8, ...); Linux starts at 10. The remainder is what is left after
    the last whole doubling (16 packets: 2, 4, 8, 2; the TR's "{2,4,8,4}" and "R = l mod (2^n - 1)" are
    misprints). A window limit, if given, caps the bursts at `max_window_packets`.
    """
    if flow_packets < 1 or iw < 1:
        raise ValueError("flow length and initial window must be at least 1 packet")
    bursts, left, w = [], flow_packets, iw
    while left > 0:
        burst = min(w, left)
        bursts.append(burst)
        left -= burst
        w *= 2
        if max_window_packets is not None:
            w = min(w, max_window_packets)
    return bursts


def burst_moments(bursts: Sequence[float]) -> BurstMoments:
    """Moments of X when every burst in `bursts` is equally likely (F9: "equally distributed")."""
    if not bursts:
        raise ValueError("need at least one burst")
    n = len(bursts)
    return BurstMoments(*(sum(x**k for x in bursts) / n for k in (1, 2, 3)))


def flow_mix_moments(
    mix: Iterable[tuple[int, float]], iw: int = 2, max_window_packets: int | None = None
) -> BurstMoments:
    """Moments of X for a mix of flow lengths, given as (flow_packets, share of flows) pairs.

    Bursts, not flows, are the queue's jobs, so a flow length contributes in proportion to its share of
    flows times its number of bursts.
    """
    weight = m1 = m2 = m3 = 0.0
    for length, share in mix:
        bursts = slow_start_bursts(length, iw, max_window_packets)
        weight += share * len(bursts)
        m1 += share * sum(bursts)
        m2 += share * sum(x**2 for x in bursts)
        m3 += share * sum(x**3 for x in bursts)
    if weight <= 0:
        raise ValueError("the mix needs a flow length with a positive share")
    return BurstMoments(m1 / weight, m2 / weight, m3 / weight)


def _check_load(load: float) -> None:
    if not 0 < load < 1:
        raise ValueError(f"load {load}: must be strictly between 0 and 1")


def mean_queue_packets(load: float, m: BurstMoments) -> float:
    """F10 (corrected): E[Q] = rho/(2(1 - rho)) E[X^2]/E[X] - rho E[X]/2, in packets.

    The TR prints rho/(2(1 - rho)) E[X^2], which is in packets^2: it lacks the /E[X] that turns the M/G/1
    workload (in service units of one burst) into packets. The -rho E[X]/2 removes half a burst on average,
    since a burst leaves packet by packet rather than all at once. With X = 1 this is the M/D/1 queue
    rho^2/(2(1 - rho)). Independent of the link rate and of the number of flows.
    """
    _check_load(load)
    return load / (2 * (1 - load)) * m.e2 / m.e1 - load * m.e1 / 2


def kappa_second_order(load: float, m: BurstMoments) -> float:
    """F11: decay rate of P(Q >= b) = exp(-b kappa), kappa = (2(1 - rho)/rho) E[X]/E[X^2], per packet."""
    _check_load(load)
    return 2 * (1 - load) / load * m.e1 / m.e2


def kappa_third_order(load: float, m: BurstMoments) -> float:
    """F12: kappa from the Cramer equation expanded to E[X^3] (the positive root of the quadratic)."""
    _check_load(load)
    a = 1.5 * m.e2 / m.e3
    return -a + math.sqrt(a * a + 6 * (1 - load) / load * m.e1 / m.e3)


def kappa_cramer(load: float, bursts: Sequence[float]) -> float:
    """F13 solved exactly: the kappa > 0 with nu (E[exp(kappa X)] - 1) = kappa (C = 1 packet per unit time).

    nu = rho/E[X] bursts per packet time. The left side minus the right is convex and negative just above 0
    (slope rho - 1). Truncating E[exp(kappa X)] after the X^2 or X^3 term gives F11 and F12; the dropped
    terms are positive, so the exact root lies below both, and bisection on (0, F11's kappa] finds it.
    """
    m = burst_moments(bursts)
    nu = load / m.e1

    def excess(k: float) -> float:
        return nu * (sum(math.exp(k * x) for x in bursts) / len(bursts) - 1) - k

    lo, hi = 0.0, kappa_second_order(load, m)
    for _ in range(200):
        mid = (lo + hi) / 2
        if excess(mid) > 0:
            hi = mid
        else:
            lo = mid
    return (lo + hi) / 2


def _third_order_prefactor(load: float, m: BurstMoments, kappa: float) -> float:
    # F12's prefactor (C - alpha(0))/(kappa alpha'(kappa)) to the same order; exactly 1 at second order.
    return (1 - load) / load * m.e1 / (kappa / 2 * m.e2 + kappa**2 / 3 * m.e3)


def overflow_probability(buffer_packets: float, load: float, m: BurstMoments, order: int = 2) -> float:
    """F11 (order 2) or F12 (order 3): P(Q >= b) for an M/G/1 queue of slow-start bursts."""
    if order == 2:
        return math.exp(-buffer_packets * kappa_second_order(load, m))
    if order == 3:
        k = kappa_third_order(load, m)
        return min(1.0, _third_order_prefactor(load, m, k) * math.exp(-buffer_packets * k))
    raise ValueError("order must be 2 or 3")


def buffer_for_overflow_probability(probability: float, load: float, m: BurstMoments, order: int = 2) -> float:
    """The buffer b in packets with P(Q >= b) = `probability` (F11 or F12 inverted)."""
    if not 0 < probability < 1:
        raise ValueError(f"probability {probability}: must be strictly between 0 and 1")
    if order == 2:
        return math.log(1 / probability) / kappa_second_order(load, m)
    if order == 3:
        k = kappa_third_order(load, m)
        return max(0.0, math.log(_third_order_prefactor(load, m, k) / probability) / k)
    raise ValueError("order must be 2 or 3")


def md1_kappa(load: float) -> float:
    """F14: smoothed arrivals (every burst one packet, an M/D/1 queue): kappa = 2(1 - rho)/rho."""
    return kappa_second_order(load, BurstMoments(1.0, 1.0, 1.0))


def md1_buffer_packets(probability: float, load: float) -> float:
    """F14: the M/D/1 buffer with P(Q >= b) = `probability`."""
    return buffer_for_overflow_probability(probability, load, BurstMoments(1.0, 1.0, 1.0))


# --- The M/M/1 slide numbers (F21) -------------------------------------------------------------


def mm1_mean_packets(load: float) -> float:
    """F21: mean M/M/1 occupancy rho/(1 - rho) (rho = 0.5 gives 1 packet, 0.75 gives 3)."""
    _check_load(load)
    return load / (1 - load)


def mm1_tail_probability(packets: int, load: float) -> float:
    """F21: P(occupancy >= k) = rho^k in an M/M/1 queue."""
    _check_load(load)
    return load**packets


# --- Loss (F15-F17) ----------------------------------------------------------------------------


def mathis_throughput_pps(rtt_s: float, loss_rate: float) -> float:
    """F15: a Reno flow's rate R = 0.87/(T sqrt(p)) packets/s, T the RTT including queueing."""
    return MATHIS_K / (rtt_s * math.sqrt(loss_rate))


def loss_rate_persistent(flows: int, bdp_packets: float, buffer_packets: float) -> float:
    """F16: p = (0.87 N)^2/(C Tp + B)^2 for N persistent flows saturating the link (Tp round-trip, so C Tp = BDP).

    F15 solved for p with each flow at C/N and RTT = Tp + B/C (every flow sees a full buffer). Outside its
    regime (windows of a few packets, where timeouts dominate) it overestimates, and it can exceed 1.
    """
    return (MATHIS_K * flows) ** 2 / (bdp_packets + buffer_packets) ** 2


def morris_loss(window_packets: float) -> float:
    """F17: loss rate l = 0.76/w^2 for a per-flow window of w packets (halving w quadruples l)."""
    return MORRIS_K / window_packets**2


# --- Headline predictions for one configuration ------------------------------------------------


@dataclass(frozen=True)
class BufferPrediction:
    buffer_packets: float
    stanford_multiple: float  # B / (RTT*C/sqrt(n))
    bdp_multiple: float  # B / (RTT*C)
    max_queueing_delay_ms: float  # B/C
    window_per_flow_packets: float  # (BDP + B)/n: a flow's window when pipe and buffer are full (F3)
    utilization_lower_bound: float  # F7
    sum_windows_mean_packets: float  # F6/F7 normal model
    sum_windows_sd_packets: float
    in_phase_utilization: float  # F2/F3/F19: all flows in phase, i.e. the worst case of synchronization
    in_phase_period_s: float  # F19 loss-to-loss period of in-phase flows
    loss_rate_persistent: float  # F16
    loss_rate_morris: float  # F17 at window_per_flow_packets
    short_flow_overflow_probability: float | None  # F11 P(Q >= B) for the short-flow traffic, if a load is given
    cc_utilization_bound: float | None = None  # F7 with the cc's window shape (ccrules); None: Reno's is F7, or BBR


@dataclass(frozen=True)
class ShortFlowPrediction:
    load: float
    flow_packets: int
    iw: int
    bursts: list[int]
    mean_burst_packets: float  # E[X]
    burst_second_moment: float  # E[X^2], packets^2
    burst_third_moment: float  # E[X^3], packets^3
    mean_queue_packets: float  # F10
    kappa_per_packet: float  # F11
    kappa3_per_packet: float  # F12
    buffer_for_probability: dict[float, float]  # F11: P(Q >= B) -> B in packets
    md1_buffer_packets: float  # F14 at P = 0.01


@dataclass(frozen=True)
class Prediction:
    flows: int
    rate_mbps: float
    rtts_ms: list[float]
    rtt_ms: float  # effective (harmonic-mean, F20) RTT
    packet_bytes: int
    rate_pps: float
    bdp_packets: float  # F1
    stanford_packets: float  # F4
    buffers: list[BufferPrediction]
    short_flows: ShortFlowPrediction | None
    cc: str = "reno"
    cc_rule_packets: float | None = None  # the cc's rule for these flows (ccrules); Reno's is stanford_packets
    cc_single_flow_packets: float | None = None  # the cc's rule for one flow
    cc_rule_sources: dict[str, str] | None = None  # where the one-flow and the n-flow rule come from

    def to_dict(self) -> dict:
        d = asdict(self)
        if self.short_flows is not None:  # JSON keys must be strings
            d["short_flows"]["buffer_for_probability"] = {
                str(p): b for p, b in self.short_flows.buffer_for_probability.items()
            }
        return d


def predict_short_flows(load: float, flow_packets: int = 14, iw: int = 2) -> ShortFlowPrediction:
    """F9-F14 for Poisson arrivals of `flow_packets`-long flows at `load` (14 packets: the paper's Fig 13/14)."""
    bursts = slow_start_bursts(flow_packets, iw)
    m = burst_moments(bursts)
    return ShortFlowPrediction(
        load=load,
        flow_packets=flow_packets,
        iw=iw,
        bursts=bursts,
        mean_burst_packets=m.e1,
        burst_second_moment=m.e2,
        burst_third_moment=m.e3,
        mean_queue_packets=mean_queue_packets(load, m),
        kappa_per_packet=kappa_second_order(load, m),
        kappa3_per_packet=kappa_third_order(load, m),
        buffer_for_probability={p: buffer_for_overflow_probability(p, load, m) for p in SHORT_FLOW_PROBABILITIES},
        md1_buffer_packets=md1_buffer_packets(0.01, load),
    )


def predict(
    flows: int,
    rate_mbps: float,
    rtt_ms: float | Sequence[float],
    buffer_packets: float | Sequence[float] | None = None,
    packet_bytes: int = PACKET_BYTES,
    iw: int = 2,
    load: float | None = None,
    short_flow_packets: int = 14,
    cc: str = "reno",
) -> Prediction:
    """The headline predictions for `flows` long flows through a `rate_mbps` link.

    `rtt_ms` may be a list of per-flow-group RTTs; their harmonic mean (F20) is used. Without
    `buffer_packets` the two rules are evaluated: RTT*C/sqrt(n) and RTT*C. With a `load`, short-flow
    numbers for Poisson `short_flow_packets`-long flows with initial window `iw` are added. Another
    `cc` than Reno adds its rule (ccrules) and evaluates it too.
    """
    rtts = [float(rtt_ms)] if isinstance(rtt_ms, int | float) else [float(r) for r in rtt_ms]
    rtt_s = harmonic_mean_rtt_s(r / 1000 for r in rtts)
    rate_bps = rate_mbps * 1e6
    rate_pps = rate_bps / (8 * packet_bytes)
    bdp = bdp_packets(rtt_s, rate_bps, packet_bytes)
    stanford = stanford_packets(rtt_s, rate_bps, flows, packet_bytes)
    rule = rule_for(cc)
    cc_rule = rule.packets(bdp, flows)
    if buffer_packets is None:
        buffers = [stanford, bdp] if cc == "reno" else [cc_rule, stanford, bdp]
    elif isinstance(buffer_packets, int | float):
        buffers = [float(buffer_packets)]
    else:
        buffers = [float(b) for b in buffer_packets]
    short = predict_short_flows(load, short_flow_packets, iw) if load is not None else None
    short_m = burst_moments(short.bursts) if short is not None else None

    rows = []
    for b in buffers:
        mean, sd = sum_of_windows_normal(b, bdp, flows)
        window = (bdp + b) / flows
        rows.append(
            BufferPrediction(
                buffer_packets=b,
                stanford_multiple=b / stanford,
                bdp_multiple=b / bdp,
                max_queueing_delay_ms=1000 * b / rate_pps,
                window_per_flow_packets=window,
                utilization_lower_bound=utilization_lower_bound(b, bdp, flows),
                sum_windows_mean_packets=mean,
                sum_windows_sd_packets=sd,
                in_phase_utilization=single_flow_utilization(b, bdp),
                in_phase_period_s=sawtooth_period_s(b, bdp, rate_pps, flows),
                loss_rate_persistent=loss_rate_persistent(flows, bdp, b),
                loss_rate_morris=morris_loss(window),
                short_flow_overflow_probability=(
                    overflow_probability(b, short.load, short_m) if short is not None and short_m else None
                ),
                cc_utilization_bound=ccrule_bound(cc, b, bdp, flows) if cc not in ("reno", "bbr") else None,
            )
        )
    return Prediction(
        flows=flows,
        rate_mbps=rate_mbps,
        rtts_ms=rtts,
        rtt_ms=1000 * rtt_s,
        packet_bytes=packet_bytes,
        rate_pps=rate_pps,
        bdp_packets=bdp,
        stanford_packets=stanford,
        buffers=rows,
        short_flows=short,
        cc=cc,
        cc_rule_packets=cc_rule,
        cc_single_flow_packets=rule.single_flow_packets(bdp),
        cc_rule_sources={"one_flow": rule.single_flow_from, "n_flows": rule.many_flows_from},
    )


# --- The text report ---------------------------------------------------------------------------


def _pct(fraction: float) -> str:
    """A percentage with enough decimals to show what is missing from 100% (F7 bounds sit at 99.99...)."""
    pct = 100 * fraction
    shortfall = 100 - pct
    if shortfall <= 0:
        return "100 %"
    decimals = min(8, max(1, 2 - math.floor(math.log10(shortfall)))) if pct > 90 else 1
    return f"{pct:.{decimals}f} %"


def _prob(p: float) -> str:
    return f"{p:.3g}" if p >= 1e-3 else f"{p:.2e}"


def _loss(p: float) -> str:
    return f"{100 * p:.3g} %" + (" (a rate over 1: outside the formula's regime)" if p > 1 else "")


def _packets(x: float) -> str:
    return f"{x:g}" if x == round(x) else f"{x:.1f}"


def _line(label: str, value: str, formula: str) -> str:
    return f"  {label:<36}{value:<40} {formula}".rstrip()


def format_report(p: Prediction) -> str:
    """One line per quantity: what it is, its value with units, and the formula id (checklist section 0)."""
    rtt = f"{p.rtt_ms:g} ms"
    if len(p.rtts_ms) > 1:
        rtt = f"{p.rtt_ms:.2f} ms (harmonic mean of {', '.join(f'{r:g}' for r in p.rtts_ms)})"
    lines = [
        f"Model predictions: {p.flows} long flow{'s' if p.flows != 1 else ''}, {p.rate_mbps:g} Mb/s, "
        f"{p.packet_bytes}-byte packets (formula ids: docs/references.md, Formulas)",
        _line("round-trip time", rtt, "F20" if len(p.rtts_ms) > 1 else ""),
        _line("link rate", f"{p.rate_pps:.1f} packets/s", ""),
        _line("rule of thumb RTT*C", f"{p.bdp_packets:.1f} packets", "F1"),
        _line("RTT*C/sqrt(n)", f"{p.stanford_packets:.1f} packets", "F4"),
    ]
    if p.cc != "reno" and p.cc_rule_packets is not None and p.cc_single_flow_packets is not None:
        sources = p.cc_rule_sources or {}
        lines += [
            _line(
                f"{p.cc} rule, {p.flows} flow{'s' if p.flows != 1 else ''}",
                f"{p.cc_rule_packets:.1f} packets",
                "ccrules",
            ),
            _line(f"{p.cc} rule, one flow", f"{p.cc_single_flow_packets:.1f} packets", "ccrules"),
            f"  ({p.cc}, one flow: {sources.get('one_flow', '')})",
            f"  ({p.cc}, n flows: {sources.get('n_flows', '')})",
        ]
    for b in p.buffers:
        lines += [
            f"buffer {_packets(b.buffer_packets)} packets = {b.stanford_multiple:.3g} x RTT*C/sqrt(n) = "
            f"{b.bdp_multiple:.3g} x RTT*C",
            _line("max queueing delay B/C", f"{b.max_queueing_delay_ms:.2f} ms", ""),
            _line("utilization lower bound", _pct(b.utilization_lower_bound), "F7"),
            *(
                [_line(f"  the same with {p.cc}'s window", _pct(b.cc_utilization_bound), "F7, ccrules")]
                if b.cc_utilization_bound is not None
                else []
            ),
            _line(
                "sum of windows (normal model)",
                f"mean {b.sum_windows_mean_packets:.1f}, sd {b.sum_windows_sd_packets:.1f} packets",
                "F6",
            ),
            _line("window per flow (BDP + B)/n", f"{b.window_per_flow_packets:.2f} packets", "F3"),
            _line("utilization, flows in phase", _pct(b.in_phase_utilization), "F2/F19"),
            _line("sawtooth period, flows in phase", f"{b.in_phase_period_s:.3g} s", "F19"),
            _line("loss rate, persistent flows", _loss(b.loss_rate_persistent), "F16"),
            _line("loss rate from window (Morris)", _loss(b.loss_rate_morris), "F17"),
        ]
        if b.window_per_flow_packets < 3:
            lines.append("  (windows under 3 packets: timeouts dominate, F16/F17 overestimate loss)")
        if b.short_flow_overflow_probability is not None:
            lines.append(_line("short flows: P(Q >= B)", _prob(b.short_flow_overflow_probability), "F11"))
    s = p.short_flows
    if s is not None:
        lines += [
            f"short flows: {s.flow_packets} packets each, initial window {s.iw}, load {s.load:g}, "
            f"bursts {{{', '.join(map(str, s.bursts))}}}",
            _line("mean burst E[X]", f"{s.mean_burst_packets:.2f} packets", "F9"),
            _line("E[X^2]", f"{s.burst_second_moment:.2f} packets^2", "F9"),
            _line("mean queue", f"{s.mean_queue_packets:.2f} packets", "F10"),
            _line(
                "tail decay kappa", f"{s.kappa_per_packet:.4g} /packet (3rd order {s.kappa3_per_packet:.4g})", "F11/F12"
            ),
        ]
        for prob, b in s.buffer_for_probability.items():
            lines.append(_line(f"buffer for P(Q >= B) = {prob:g}", f"{b:.1f} packets", "F11"))
        lines.append(_line("M/D/1 buffer for P(Q >= B) = 0.01", f"{s.md1_buffer_packets:.1f} packets", "F14"))
    return "\n".join(lines)
