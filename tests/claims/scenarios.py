"""The claims the toolkit makes of its emulation, and the few runs that serve them.

Each scenario is one or a few real runs of the command a user types (`bufsize measure`, `search`,
`verify`, on the emulated link or the twin); each claim is checked on the runs of its scenario. The
tolerances are those the tests these claims came from used; what was measured when they were set
is in docs/lab/ (links.md for the links and the one-flow search, the claims' run for the seed's
scale). A planted fault (claims/faults.py) names the claims it must break in FAULTS_BREAK.
"""

from __future__ import annotations

import csv
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from bufsize.theory.model import single_flow_utilization
from bufsize.topologies import FRAME_BYTES
from claims.verdict import Check, Claim


@dataclass(frozen=True)
class Command:
    """One run: `bufsize ARGV --json --out DIR` (or, with vm, the VM stage's claim tests on Debian's
    stock kernel), and about how long it takes alone on 2 cores."""

    name: str
    argv: tuple[str, ...]
    seconds: float  # what it takes on a quiet 2-core machine, for the progress line
    timeout: float = 600.0
    vm: bool = False


@dataclass(frozen=True)
class Scenario:
    name: str
    says: str
    commands: tuple[Command, ...]
    claims: tuple[Claim, ...]


def frame_ms(rate_mbps: float) -> float:
    return FRAME_BYTES * 8 / (rate_mbps * 1e3)


# ---- the seed's scale: 200 flows -------------------------------------------------------------------
# 62.5 Mb/s, 87 ms, 200 reno flows over 100 hosts, a 50-packet buffer, 20 s measured; the receivers ACK
# every segment (a delayed ACK holds the odd segment of a small window up to 40 ms: TCP's delay, not
# the link's).
SEED_RATE, SEED_RTT = 62.5, 87.0
SEED_200 = Command("seed-200", ("measure", "--flows", "200", "--hosts", "100", "--rate-mbps", "62.5",
                                "--rtt-ms", "87", "--cc", "reno", "--buffer-packets", "50", "--duration", "20",
                                "--fidelity-s", "5", "--delayed-ack", "off", "--reference-s", "5"), 65)  # fmt: skip
MEDIAN_RTT_TOLERANCE_MS = 1.5  # the flows' median: a delay line off by 2 % of 87 ms fails
FLOW_RTT_TOLERANCE_MS = 3.0  # each flow; all but one in twenty


def rate(runs: dict[str, dict]) -> Check:
    r = runs["seed-200"]
    ref, gaps, util = r["reference_rate_mbps"], r["fidelity"]["rate_from_gaps_mbps"], r["utilization"]
    ok = ref >= 0.98 * SEED_RATE and abs(gaps - SEED_RATE) <= 0.01 * SEED_RATE and util >= 0.95
    return Check(ok, f"reference {ref:.2f} Mb/s (>= {0.98 * SEED_RATE:.2f}), departures {gaps:.2f} Mb/s "
                     f"(62.5 +- 1 %), utilization {util:.3f} (>= 0.95)")  # fmt: skip


def pacing(runs: dict[str, dict]) -> Check:
    fid = runs["seed-200"]["fidelity"]
    gap, ideal = fid["median_gap_us"], fid["ideal_us"]
    ok = (fid["available"] is True and fid["gaps_busy"] > 10_000 and abs(gap - ideal) <= 0.01 * ideal
          and math.isclose(ideal, frame_ms(SEED_RATE) * 1000, rel_tol=1e-3))  # fmt: skip
    return Check(ok, f"median busy gap {gap:.1f} us against {ideal:.1f} us (+- 1 %) over {fid['gaps_busy']} gaps")


def delay_under_load(runs: dict[str, dict]) -> Check:
    """Each flow's smoothed RTT is the base RTT plus the queue's mean wait (mean backlog over C), from
    the cwnd trace's last 15 s. A flow in RTO backoff for the whole window has no sample there; one
    is allowed where the run counted timeouts for it, and the claim must still cover three in four."""
    r = runs["seed-200"]
    flows = 200
    expected = SEED_RTT + r["queue"]["mean_packets"] * frame_ms(SEED_RATE)
    with open(Path(r["_dir"]) / "cwnd_flows.csv") as f:
        rows = list(csv.DictReader(f))
    end = max(float(row["t_s"]) for row in rows)
    srtt: dict[str, list[float]] = {}
    for row in rows:
        if float(row["t_s"]) >= end - 15:
            srtt.setdefault(row["flow"], []).append(float(row["srtt_ms"]))
    per_flow = {flow: statistics.median(v) for flow, v in srtt.items()}
    silent, timeouts = flows - len(per_flow), r["points"][0]["tcp"]["timeouts"]
    middle = statistics.median(per_flow.values())
    off = sum(abs(m - expected) > FLOW_RTT_TOLERANCE_MS for m in per_flow.values())
    ok = (len({row["flow"] for row in rows}) == flows and silent <= min(timeouts, flows // 4)
          and abs(middle - expected) <= MEDIAN_RTT_TOLERANCE_MS and off <= flows // 20)  # fmt: skip
    return Check(ok, f"median RTT {middle:.2f} ms against {expected:.2f} (+- {MEDIAN_RTT_TOLERANCE_MS}), "
                     f"{off} flows off by > {FLOW_RTT_TOLERANCE_MS} ms (<= 10), {silent} untraced "
                     f"({timeouts} timeouts)")  # fmt: skip


SEED_200_SCENARIO = Scenario(
    "seed-200", "200 reno flows over 100 hosts at the seed's link (62.5 Mb/s, 87 ms, 50 packets)", (SEED_200,),
    (Claim("rate", "the bottleneck serves the configured rate", ("seed-200",), rate),
     Claim("pacing", "the line sends each frame one frame time after the last while busy", ("seed-200",), pacing),
     Claim("delay-under-load", "each flow's RTT is the base RTT plus the queue's wait", ("seed-200",),
           delay_under_load)),
)  # fmt: skip

# ---- the seed's largest N: 800 flows over 400 hosts --------------------------------------------------
SEED_800 = Command("seed-800", ("measure", "--flows", "800", "--hosts", "400", "--rate-mbps", "62.5", "--rtt-ms",
                                "87", "--cc", "reno", "--buffer-packets", "50", "--duration", "10", "--warmup-s", "5",
                                "--reference-s", "5", "--fidelity-s", "2"), 65)  # fmt: skip


def flows_800(runs: dict[str, dict]) -> Check:
    start = runs["seed-800"]["flows_start"]
    per_host = start["per_host"]
    ok = (start["established"] == 800 and start["held_until_all_up"] and len(per_host) == 400
          and set(per_host) == {2} and start["congestion_controls_seen"] == {"reno": 800})  # fmt: skip
    return Check(
        ok,
        f"{start['established']} established in {start['seconds_to_all_established']} s, held until "
        f"all up: {start['held_until_all_up']}, congestion controls {start['congestion_controls_seen']}",
    )


def busy_800(runs: dict[str, dict]) -> Check:
    """At N = 800 a 50-packet buffer is several times the answer for 99 % (about 8 packets): the link
    stays busy. Judged against the rate the link served in the same run (its reference)."""
    r = runs["seed-800"]
    ref = r["reference_rate_mbps"]
    served = r["utilization"] * SEED_RATE / ref
    ok = (ref >= 0.95 * SEED_RATE and served >= 0.97 and r["drops"]["outside_bottleneck_total"] == 0
          and r["queue"]["max_packets"] <= 50)  # fmt: skip
    return Check(
        ok,
        f"served {served:.3f} of the reference {ref:.2f} Mb/s (>= 0.97), drops outside the "
        f"bottleneck {r['drops']['outside_bottleneck_total']}, queue max {r['queue']['max_packets']}",
    )


SEED_800_SCENARIO = Scenario(
    "seed-800", "800 reno flows over 400 hosts at the seed's link", (SEED_800,),
    (Claim("flows-800", "800 flows over 400 hosts are all up before anything is measured, each with the "
           "congestion control asked", ("seed-800",), flows_800),
     Claim("busy-800", "800 flows keep a 50-packet buffer's link busy", ("seed-800",), busy_800)),
)  # fmt: skip

# ---- one configuration on both links ---------------------------------------------------------------------
# Reno on 10 Mb/s with a 20 ms RTT (a BDP of 16.5 packets), 20 s measured, judged by the median of the
# one-second samples. A window's whole cycle takes well under a second here, so 5 s of warm-up, 3 of
# reference and 2 of settling after the buffer change leave the flows in their steady state. Both TCPs
# follow the same Reno rules: a link that served late, or a twin whose TCP differed, moves them apart by
# more than 2 points.
LINK_RATE, LINK_RTT = 10.0, 20.0
BDP = LINK_RATE * 1e6 / 8 * LINK_RTT / 1000 / FRAME_BYTES  # 16.5
AGREE = 0.02


def link_run(link: str, flows: int, buffer_packets: int) -> Command:
    name = f"{'emulated' if link == 'emulated' else 'twin'}-n{flows}-b{buffer_packets}"
    argv = (
        "measure",
        "--link",
        link,
        "--flows",
        str(flows),
        "--hosts",
        str(flows),
        "--rate-mbps",
        str(LINK_RATE),
        "--rtt-ms",
        str(LINK_RTT),
        "--cc",
        "reno",
        "--buffer-packets",
        str(buffer_packets),
        "--duration",
        "20",
        "--warmup-s",
        "5",
        "--reference-s",
        "3",
        "--settle-s",
        "2",
    )
    return Command(name, argv, 35 if link == "emulated" else 3)


FULL_B, QUARTER_B = round(BDP), round(0.25 * BDP)
LINK_RUNS = (link_run("simulated", 4, FULL_B), link_run("simulated", 1, QUARTER_B),
             link_run("emulated", 4, FULL_B), link_run("emulated", 1, QUARTER_B))  # fmt: skip


def median_util(r: dict) -> float:
    return r["points"][0]["utilization_samples"]["median"]


def agree_bdp(runs: dict[str, dict]) -> Check:
    e, t = median_util(runs[f"emulated-n4-b{FULL_B}"]), median_util(runs[f"twin-n4-b{FULL_B}"])
    return Check(
        abs(e - t) <= AGREE and min(e, t) >= 0.98, f"emulated {e:.4f}, twin {t:.4f} (within {AGREE}, both >= 0.98)"
    )


def agree_quarter(runs: dict[str, dict]) -> Check:
    e, t = median_util(runs[f"emulated-n1-b{QUARTER_B}"]), median_util(runs[f"twin-n1-b{QUARTER_B}"])
    return Check(abs(e - t) <= AGREE, f"emulated {e:.4f}, twin {t:.4f} (within {AGREE})")


def sawtooth(runs: dict[str, dict]) -> Check:
    """Both fall short of the fluid sawtooth (theory.model) by 6-8 points as measured, and neither
    exceeds it."""
    model = single_flow_utilization(QUARTER_B, BDP)
    got = [median_util(runs[f"{link}-n1-b{QUARTER_B}"]) for link in ("emulated", "twin")]
    ok = all(model - 0.09 <= u <= model + AGREE for u in got)
    return Check(ok, f"emulated {got[0]:.4f}, twin {got[1]:.4f}, fluid sawtooth {model:.4f} (from -0.09 to +{AGREE})")


LINKS_SCENARIO = Scenario(
    "links", "one to four reno flows at 10 Mb/s and 20 ms on the emulated link and on the twin", LINK_RUNS,
    (Claim("links-agree-bdp", "with a BDP of buffer both links stay full and agree within 2 points",
           (f"emulated-n4-b{FULL_B}", f"twin-n4-b{FULL_B}"), agree_bdp),
     Claim("links-agree-quarter-bdp", "one flow at a quarter BDP idles alike on both links (within 2 points)",
           (f"emulated-n1-b{QUARTER_B}", f"twin-n1-b{QUARTER_B}"), agree_quarter),
     Claim("sawtooth-one-flow", "one flow at a quarter BDP carries no more than the fluid sawtooth says, on both "
           "links", (f"emulated-n1-b{QUARTER_B}", f"twin-n1-b{QUARTER_B}"), sawtooth)),
)  # fmt: skip

# ---- an answer on a link whose answer is known -----------------------------------------------------------
# One Reno flow at 20 Mb/s and 20 ms (a BDP of 33 packets), the published figures' search rule at +-20 %.
# Its utilization at a buffer under one BDP is at most the fluid sawtooth's, which reaches 99 % at about
# 0.705 BDP; real TCP loses a little more to recovery and its ACK clock. So the answer lies between the
# fluid's 99 % buffer and 1.2 BDP, and every probe within 5 points under and 1 over the fluid curve.
SEARCH = Command("search-one-flow", ("search", "--flows", "1", "--hosts", "1", "--cc", "reno", "--rate-mbps", "20",
                                     "--rtt-ms", "20", "--precision", "0.2", "--fidelity-s", "0"), 55)  # fmt: skip
ABOVE_FLUID, UNDER_FLUID = 0.01, 0.05


def answer_one_flow(runs: dict[str, dict]) -> Check:
    r = runs["search-one-flow"]
    bdp = r["bdp_packets"]
    fluid99 = next(b / 10 for b in range(1, 10 * round(bdp)) if single_flow_utilization(b / 10, bdp) >= 0.99)
    off = [(p["buffer_packets"], round(p["median"], 4)) for p in r["probes"]
           if not (single_flow_utilization(p["buffer_packets"], bdp) - UNDER_FLUID <= p["median"]
                   <= single_flow_utilization(p["buffer_packets"], bdp) + ABOVE_FLUID)]  # fmt: skip
    answer = r["buffer_packets"]
    ok = math.floor(fluid99) <= answer <= 1.2 * bdp and not off
    return Check(ok, f"answer {answer} packets (from {math.floor(fluid99)} to {1.2 * bdp:.1f}), "
                     f"{len(r['probes'])} probes, off the fluid curve: {off or 'none'}")  # fmt: skip


SEARCH_SCENARIO = Scenario(
    "search-known", "a search for one reno flow, whose answer the fluid sawtooth bounds", (SEARCH,),
    (Claim("answer-one-flow", "the search answers where the fluid sawtooth says, for one flow", ("search-one-flow",),
           answer_one_flow),),
)  # fmt: skip

# ---- the buffer changed in place, on both of the switch's shapers -----------------------------------------
# One cubic flow at 20 Mb/s and 10 ms warms up at 2 BDP (33 packets); the buffer is then shrunk in place
# to 4 packets and measured. The leaf's new limit holds the queue, and the flow goes on over half the
# line (one flow at a quarter BDP carries about 0.8 of it).
INPLACE_B = 4


def inplace_run(shaper: str) -> Command:
    argv = (
        "measure",
        "--shaper",
        shaper,
        "--flows",
        "1",
        "--hosts",
        "1",
        "--rate-mbps",
        "20",
        "--rtt-ms",
        "10",
        "--cc",
        "cubic",
        "--buffer-packets",
        str(INPLACE_B),
        "--duration",
        "5",
        "--warmup-s",
        "2",
        "--reference-s",
        "2",
        "--settle-s",
        "1",
        "--fidelity-s",
        "0",
    )
    return Command(f"in-place-{shaper}", argv, 18)


def in_place(name: str):  # noqa: ANN201 - a check
    def check(runs: dict[str, dict]) -> Check:
        r = runs[name]
        (p,) = r["points"]
        q, med = p["queue"], p["utilization_samples"]["median"]
        ok = p["buffer_packets"] == INPLACE_B and q["samples"] > 0 and q["max_packets"] <= INPLACE_B and med > 0.5
        return Check(ok, f"queue max {q['max_packets']} packets of {INPLACE_B} over {q['samples']} samples, "
                         f"median utilization {med:.3f} (> 0.5)")  # fmt: skip

    return check


INPLACE_SCENARIO = Scenario(
    "in-place", "the buffer shrunk in place under a running flow, on tbf and on htb",
    (inplace_run("tbf"), inplace_run("htb")),
    tuple(Claim(f"in-place-{s}", f"a buffer shrunk in place on {s} holds the queue to its new limit while the "
                "flow goes on", (f"in-place-{s}",), in_place(f"in-place-{s}")) for s in ("tbf", "htb")),
)  # fmt: skip

# ---- each host its own RTT --------------------------------------------------------------------------------
# Four hosts at 20..300 ms: each host's smallest ping is its configured RTT plus what the same path adds
# with no delay (measured just before), within 1 % + 0.3 ms. That path itself (veths, the switch, the
# delay line at no delay) adds well under 1 ms (0.08-0.41 ms measured): a delay added to every frame
# would hide in the difference, not under that bound.
MAX_FLOOR_MS = 1.0
RTT_FLOOR = Command("path-floor", ("verify", "--hosts", "4", "--rtt-ms", "0", "--no-rate"), 8)
RTTS = Command("host-rtts", ("verify", "--hosts", "4", "--rtt-ms", "20..300", "--no-rate"), 10)


def host_rtts(runs: dict[str, dict]) -> Check:
    floor = min(p["min_ms"] for p in runs["path-floor"]["per_host"])
    hosts = runs["host-rtts"]["per_host"]
    off = [
        (p["host"], round(p["min_ms"] - floor - p["configured_ms"], 3))
        for p in hosts
        if abs(p["min_ms"] - floor - p["configured_ms"]) > 0.01 * p["configured_ms"] + 0.3 or p["loss_pct"] > 0
    ]
    figures = ", ".join(f"h{p['host']} {p['configured_ms']:g}: {p['min_ms']:.3f}" for p in hosts)
    ok = len(hosts) == 4 and not off and floor <= MAX_FLOOR_MS
    return Check(ok, f"{figures} ms, path floor {floor:.3f} ms (<= {MAX_FLOOR_MS:g}); off: {off or 'none'}")


RTTS_SCENARIO = Scenario(
    "rtts",
    "four hosts at 20 to 300 ms, pinged through an idle link",
    (RTT_FLOOR, RTTS),
    (Claim("host-rtts", "each host's round trip is its own configured RTT", ("path-floor", "host-rtts"), host_rtts),),
)

# ---- netem on Debian's stock kernel (the VM stage) ------------------------------------------------------
# The guest (tests/vm/stage.sh, usually under software emulation) runs verify's measurement with netem and
# with the delay line, each against the same path at zero delay (tests/test_netem_vm.py, marked claim), and
# prints each claim's figures; the host judges them, with its own measure of steal and other programs'
# CPU while the guest ran. The allowances are the guest's: its CPU is emulated.
VM = Command("vm", (), 110, timeout=1200, vm=True)


def from_guest(name: str):  # noqa: ANN201 - a check
    def check(runs: dict[str, dict]) -> Check:
        got = runs["vm"]["claims"][name]
        return Check(bool(got["ok"]), got["figure"])

    return check


VM_SCENARIO = Scenario(
    "vm", "netem and the delay line on Debian's stock kernel, in a VM", (VM,),
    (Claim("vm-netem-rtts", "netem gives each host its own RTT over the same path at zero delay (within 3 % plus "
           "the guest's noise, at most 4 ms)", ("vm",), from_guest("vm-netem-rtts")),
     Claim("vm-netem-rate", "the shaper behind netem serves 55 to 101 % of its rate in an emulated CPU", ("vm",),
           from_guest("vm-netem-rate")),
     Claim("vm-netem-agrees", "netem and the delay line give the same delays and rates", ("vm",),
           from_guest("vm-netem-agrees"))),
)  # fmt: skip

SCENARIOS = (RTTS_SCENARIO, INPLACE_SCENARIO, LINKS_SCENARIO, SEARCH_SCENARIO, SEED_200_SCENARIO, SEED_800_SCENARIO,
             VM_SCENARIO)  # fmt: skip

# Which claims each planted fault must break (claims/faults.py).
FAULTS_BREAK = {
    "line-slow": ("rate", "pacing"),
    "delay-late": ("delay-under-load", "host-rtts"),
    "queue-monitor-half": ("rate", "pacing", "delay-under-load"),
    "buffer-stuck": ("in-place-tbf", "in-place-htb", "sawtooth-one-flow", "links-agree-quarter-bdp"),
    "twin-high": ("links-agree-bdp", "links-agree-quarter-bdp"),
    "samples-high": ("answer-one-flow",),
    "line-stalls": ("busy-800",),
    "one-host-cubic": ("flows-800",),
    "netem-short": ("vm-netem-rtts", "vm-netem-agrees"),
    "shaper-half": ("vm-netem-rate",),
}
