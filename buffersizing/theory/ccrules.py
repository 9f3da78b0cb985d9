"""Buffer rules for the congestion controls this kernel runs: Reno's (Appenzeller 2004), and CUBIC's and BBR's.

Appenzeller 2004's two rules assume Reno, whose window halves on a loss: one flow needs RTT*C (F1), n
desynchronized flows RTT*C/sqrt(n) (F4). Spang, Arslan and McKeown, "Updating the Theory of Buffer
Sizing" (Performance 2021, arXiv 2109.11693), redo both for the algorithms in use since:

- One loss-based flow whose window is multiplied by beta on a loss keeps the link busy if the
  window after the cut still fills the pipe, beta (BDP + B) >= BDP, so B >= BDP (1 - beta) / beta:
  BDP for Reno (beta 0.5), 0.43 BDP for CUBIC (beta 0.7). This is the paper's single-flow result for
  a multiplicative decrease.
- n desynchronized flows: the paper shows the sum of windows still concentrates as sqrt(n), so the
  buffer still falls as 1/sqrt(n) for CUBIC (and BBR), with a constant that depends on the algorithm.

The constant for n flows is our derivation, in Appenzeller 2004's own terms (F6, F7), not the paper's: each
window follows its sawtooth from beta W to W, and the normal sum of n of them has a standard
deviation of sqrt(n) times one window's. Appenzeller 2004 takes a window uniform on [W/2, W] (Reno's straight
sawtooth), whose deviation is 1/(3 sqrt 3) of the mean window. A straight sawtooth from beta W has
(1 - beta)/((1 + beta) sqrt 3); CUBIC's window grows as W - C (K - t)^3, so it spends longer near W:
with u uniform on [0, 1] the window is W (1 - (1 - beta) u^3), whose deviation is
(1 - beta) sqrt(9/112) W against a mean of (1 - (1 - beta)/4) W. The buffer that gives the same F7
bound as Reno's rule scales with that deviation: B = (deviation / Reno's) x RTT*C/sqrt(n), 0.48 for
CUBIC. (Where CUBIC runs in its Reno-friendly region, as at small windows, its sawtooth is straight:
0.53.)

BBR (v1) is not loss-based: it paces at its estimate of the bottleneck rate and caps its data in
flight at twice its estimate of the BDP, and one round trip in eight it paces at 1.25 times the rate
and the next at 0.75. The paper models one BBR flow's utilization as min(3/4 + B/BDP, 1) (the
prediction its authors plot in their published analysis, brucespang/ifip21-buffer-sizing): the
buffer must cover the quarter of a BDP the 0.75 phase leaves unsent, B >= BDP/4. That and CUBIC's
0.43 BDP are the abstract's "60-75 % smaller" than Reno's BDP. ProbeRTT (four packets in flight for
200 ms about every 10 s) idles a single flow's link for some 2 % of the time whatever the buffer,
so one BBR flow cannot reach 99 % on its own. For n flows the paper's abstract says the sqrt(n)
rule holds for BBR too; its constant here, BDP/(4 sqrt(n)), is ours (the same quarter of a BDP
spread over n independent phases), untested until a BBR sweep is committed.

The paper's full text was not available here: the one-flow formulas are its authors' plotted
predictions and the abstract's claims; section and equation numbers are not given for that reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Window after a loss as a fraction of the window before it (the kernels' constants).
BETA = {"reno": 0.5, "cubic": 0.7, "bic": 0.8}
SOURCE = 'Spang, Arslan, McKeown, "Updating the Theory of Buffer Sizing", Performance 2021 (arXiv 2109.11693)'
SEED = "Appenzeller, Keslassy, McKeown, SIGCOMM 2004 (F1 and F4)"
# BBR v1's pacing gain in the round trip after its probe: the buffer covers the (1 - gain) x BDP it leaves unsent.
BBR_DRAIN_GAIN = 0.75


def window_deviation(cc: str) -> float:
    """Standard deviation of one flow's window over its cycle, as a share of its mean (our derivation
    for beta != 0.5; Reno's is Appenzeller 2004's F6)."""
    if cc not in BETA:
        raise ValueError(f"no loss-based window rule for {cc!r} (known: {', '.join(BETA)})")
    beta = BETA[cc]
    if cc == "cubic":
        return (1 - beta) * math.sqrt(9 / 112) / (1 - (1 - beta) / 4)
    return (1 - beta) / ((1 + beta) * math.sqrt(3))


@dataclass(frozen=True)
class CcRule:
    cc: str
    single_flow_bdps: float  # the buffer one flow needs, in BDPs
    many_flows_factor: float  # n flows need this x RTT*C/sqrt(n)
    single_flow_from: str  # where each comes from
    many_flows_from: str

    def single_flow_packets(self, bdp_packets: float) -> float:
        return self.single_flow_bdps * bdp_packets

    def packets(self, bdp_packets: float, flows: int) -> float:
        """The rule for `flows` flows: the single-flow rule for one, the 1/sqrt(n) rule for more."""
        if flows < 1:
            raise ValueError("flows must be at least 1")
        if flows == 1:
            return self.single_flow_packets(bdp_packets)
        return self.many_flows_factor * bdp_packets / math.sqrt(flows)

    def label(self) -> str:
        """How the figure names the curve."""
        if self.cc == "reno":
            return "RTT*C/sqrt(N) (Reno)"
        return f"{self.many_flows_factor:.2f} x RTT*C/sqrt(N) ({self.cc} rule)"


def rule_for(cc: str) -> CcRule:
    """The rule for `cc`; a ValueError for a congestion control without one."""
    if cc == "bbr":
        gain = 1 - BBR_DRAIN_GAIN
        return CcRule(
            "bbr",
            gain,
            gain,
            f"{SOURCE}: utilization min(3/4 + B/BDP, 1), so B >= BDP/4 (the 0.75 pacing phase)",
            "our derivation: BBR's 1/4 BDP over sqrt(n), the phases of n flows being independent",
        )
    if cc not in BETA:
        raise ValueError(f"no buffer rule for --cc {cc!r} (rules: reno, cubic, bic, bbr)")
    beta = BETA[cc]
    single = (1 - beta) / beta
    if cc == "reno":
        return CcRule("reno", single, 1.0, SEED, SEED)
    return CcRule(
        cc,
        single,
        window_deviation(cc) / window_deviation("reno"),
        f"{SOURCE}: B >= BDP (1 - beta)/beta with beta {beta}",
        f"our derivation: Appenzeller 2004's F6/F7 with {cc}'s window shape (beta {beta}); 1/sqrt(n) as in {SOURCE}",
    )


def utilization_bound(cc: str, buffer_packets: float, bdp_packets: float, flows: int) -> float:
    """Appenzeller 2004's F7 with `cc`'s window deviation (loss-based only): P(BDP <= sum W <= BDP + B) for a
    normal sum of windows centred in the buffer. For Reno it is F7 exactly."""
    if buffer_packets <= 0:
        return 0.0
    sd = math.sqrt(flows) * window_deviation(cc) * (bdp_packets + buffer_packets) / flows
    return math.erf(buffer_packets / 2 / (math.sqrt(2) * sd))
