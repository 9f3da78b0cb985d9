"""Cautions: what a result cannot vouch for although every validity check passed.

A validity flag says the emulation did what it was asked (the link's rate and pacing, the CPU
headroom, the flows). A caution says the machine around it was in a state in which answers have
moved on the machine this toolkit is developed on while every flag passed. The result stays valid
(its exit status too) and says so beside the answer, in result.json's `cautions` and in the line
the command prints, so that whoever reads the number also reads this.
"""

from __future__ import annotations

from bufsize.monitors.cpu import STEAL_LIMIT, WAKES_PER_S
from bufsize.topologies.dumbbell import HALT_POLL_NS

# The mean share of all CPU time the hypervisor took over the run past which a result is cautioned:
# the same limit at which a search's progress line names a probe's steal (why this value: there).
MAX_STEAL_SHARE = STEAL_LIMIT
FINDINGS = "docs/findings.md#answers-on-a-machine-whose-hypervisor-takes-cpu"


def cautions(monitors: dict) -> list[dict]:
    """The cautions a run's monitor summary calls for (empty when none, or when it recorded no CPU)."""
    steal = (monitors.get("cpu") or {}).get("mean_steal_share")
    if steal is None or steal <= MAX_STEAL_SHARE:
        return []
    return [
        {
            "check": "hypervisor_steal",
            "value": steal,
            "limit": MAX_STEAL_SHARE,
            "why": f"the hypervisor took this share of the CPUs; answers have moved with it while every "
            f"check passed ({FINDINGS})",
        }
    ]


def describe(found: list[dict]) -> str:
    """One clause per caution (hypervisor_steal is the only check), for the line a command prints;
    empty when there is none."""
    return "; ".join(
        f"CAUTION: the hypervisor took {c['value']:.1%} of the CPUs (over {c['limit']:.0%}), a state in "
        f"which answers have moved; repeat on a quieter machine ({FINDINGS})"
        for c in found
    )


def table_note(names: list[str] | None = None) -> str:
    """The sentence under a table some of whose runs carry a caution; `names` lists them where the
    table's rows do not say (short-flow tables: one row may draw on several runs)."""
    which = f" ({', '.join(names)})" if names else ""
    return (
        f"Cautioned runs{which} are valid, but the hypervisor took over {MAX_STEAL_SHARE:.0%} of the CPUs while "
        f"they ran, a state in which answers have moved while every check passed: see each result's `cautions` "
        f"({FINDINGS})."
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
