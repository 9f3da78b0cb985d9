"""Cautions: what a result cannot vouch for although every validity check passed.

A validity flag says, from what was measured, that the emulation did what it was asked (the link's
rate, pacing and lag, the flows). A caution says a proxy of the machine around it was out of range:
the hypervisor took CPU (answers have moved with it while every flag passed), other programs took
CPU (their load moved answers by slowing the senders while the link kept time), or the cores were
nearly never idle (the emulation's timers may then run late; whether they did is what the link's
own flags measure). The result stays valid (its exit status too) and says so beside the answer, in
result.json's `cautions` and in the line the command prints, so that whoever reads the number also
reads this.
"""

from __future__ import annotations

from bufsize.monitors.cpu import FOREIGN_LIMIT, MIN_IDLE, STEAL_LIMIT, WAKES_PER_S
from bufsize.topologies.dumbbell import HALT_POLL_NS

# The mean share of all CPU time the hypervisor took over the run past which a result is cautioned:
# the same limit at which a search's progress line names a probe's steal (why this value: there).
MAX_STEAL_SHARE = STEAL_LIMIT
FINDINGS = "docs/findings.md#answers-on-a-machine-whose-hypervisor-takes-cpu"


def cautions(monitors: dict, cpu_idle_min: float | None = None) -> list[dict]:
    """The cautions a run's monitor summary and its measurements' least idle CPU share call for
    (empty when none, or when nothing was recorded)."""
    found = []
    steal = (monitors.get("cpu") or {}).get("mean_steal_share")
    if steal is not None and steal > MAX_STEAL_SHARE:
        found.append({
            "check": "hypervisor_steal",
            "value": steal,
            "limit": MAX_STEAL_SHARE,
            "why": f"the hypervisor took this share of the CPUs; answers have moved with it while every "
            f"check passed ({FINDINGS})",
        })  # fmt: skip
    foreign = (monitors.get("cpu") or {}).get("foreign") or {}
    if foreign.get("share") is not None and foreign["share"] > FOREIGN_LIMIT:
        names = ", ".join(f"{t['name']} (pid {t['pid']}, {t['cpu_s']:g} s)" for t in foreign.get("top") or [])
        found.append({
            "check": "foreign_cpu",
            "value": foreign["share"],
            "limit": FOREIGN_LIMIT,
            "why": f"processes outside the run took this share of all cores while it ran ({names}); "
            "answers have moved under such a load while the link's checks passed",
        })  # fmt: skip
    if cpu_idle_min is not None and cpu_idle_min < MIN_IDLE:
        found.append({
            "check": "cpu_idle",
            "value": cpu_idle_min,
            "limit": MIN_IDLE,
            "why": "the least idle share of all cores over a measurement; below the limit the emulation's "
            "timers may run late, which the link's own flags (pacing, lag, lost time) measure",
        })  # fmt: skip
    return found


def describe(found: list[dict]) -> str:
    """One clause per caution, for the line a command prints; empty when there is none."""
    return "; ".join(clause(c) for c in found)


def clause(c: dict) -> str:
    if c["check"] == "hypervisor_steal":
        return (f"CAUTION: the hypervisor took {c['value']:.1%} of the CPUs (over {c['limit']:.0%}), a state in "
                f"which answers have moved; repeat on a quieter machine ({FINDINGS})")  # fmt: skip
    if c["check"] == "foreign_cpu":
        return (f"CAUTION: other programs took {c['value']:.1%} of the CPUs (over {c['limit']:.0%}); answers have "
                "moved under such a load while the link's checks passed (the result's cautions name them)")  # fmt: skip
    return (f"CAUTION: the CPUs were at least {c['value']:.0%} idle (under {c['limit']:.0%}); the link's own "
            "checks passed, repeat on a quieter machine if the answer matters")  # fmt: skip


def table_note(names: list[str] | None = None, checks: set[str] | None = None) -> str:
    """The sentence under a table some of whose runs carry a caution; `names` lists them where the
    table's rows do not say (short-flow tables: one row may draw on several runs); `checks` are the
    cautions' checks (default: the hypervisor's steal alone)."""
    which = f" ({', '.join(names)})" if names else ""
    if not checks or checks == {"hypervisor_steal"}:
        return (
            f"Cautioned runs{which} are valid, but the hypervisor took over {MAX_STEAL_SHARE:.0%} of the CPUs "
            f"while they ran, a state in which answers have moved while every check passed: see each result's "
            f"`cautions` ({FINDINGS})."
        )
    return (
        f"Cautioned runs{which} are valid, but a proxy of the machine's state was out of range while they ran "
        f"({', '.join(sorted(checks))}): see each result's `cautions` ({FINDINGS})."
    )


def idle_report(idle: dict) -> str:
    """`bufsize doctor`'s line on how idle vCPUs wait (driver, halt_poll_ns: None where there is no
    haltpoll), and what a run does about it (topologies/dumbbell.py HALT_POLL_NS)."""
    head = f"idle vCPUs:           {idle['driver'] or 'no cpuidle driver'}"
    if idle["halt_poll_ns"] is None:
        return head + " (no halt poll to set)"
    return (
        f"{head}, polling up to {idle['halt_poll_ns'] / 1000:g} us before they halt; runs raise it to "
        f"{HALT_POLL_NS / 1000:g} us while they last (a vCPU that halts waits for the hypervisor at each wake-up)"
    )


def steal_report(steal: dict) -> str:
    """`bufsize doctor`'s line on the hypervisor's steal (under_load, load_s and since_boot shares), and a
    caution where either is past the limit a result would be cautioned at: the machine's state before
    a run, where results say it after."""
    line = (
        f"hypervisor steal:     {steal['under_load']:.1%} of the CPUs with every core waking about {WAKES_PER_S} "
        f"times a second for {steal['load_s']:g} s, "
        f"{steal['since_boot']:.1%} of busy time since boot"
    )
    if max(steal["under_load"], steal["since_boot"]) > MAX_STEAL_SHARE:
        line += (
            f"\nCAUTION: over {MAX_STEAL_SHARE:.0%}: answers have moved on a machine in this state while every "
            f"check passed; a run that sees as much carries a caution ({FINDINGS})"
        )
    return line
