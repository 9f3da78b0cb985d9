"""Verdicts on claims, from the instrument's own account of each run.

A run is what one command (or probe) measured, with what the instrument said of it: whether it was
valid (its flags), and the cautions that name a cause from outside the run (the hypervisor's steal,
other programs' CPU). A claim is checked on one or more runs and ends in one of three verdicts:

- held: every run it uses was valid and undisturbed from outside, and the claim's check holds;
- broken: a valid, undisturbed run misses the check (the instrument called a run valid that the
  claim shows wrong); or a run was flagged while no cause from outside it was measured; or a run
  failed to finish;
- inconclusive: a run it uses was disturbed from outside, was measured once more, and was disturbed
  again. Its cause and figures are said; it never counts as held.

The idle-CPU caution is not a cause from outside: it is the run's own load as often as anyone's,
and the link's own flags (pacing, lag, the monitor's rate) measure whether it mattered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# Cautions that name load from outside a run (bufsize.scaffold.cautions).
OUTSIDE = ("hypervisor_steal", "foreign_cpu")
HELD, BROKEN, INCONCLUSIVE = "held", "broken", "inconclusive"
NOT_JUDGED = "not judged"  # only where a run was skipped on purpose: never a pass, never a failure


@dataclass
class Run:
    """One measurement and the instrument's account of it."""

    name: str
    data: dict = field(default_factory=dict)  # the result (result.json) or the probe's record
    error: str | None = None  # it did not finish: why
    seconds: float = 0.0  # wall time
    skipped: bool = False  # it could not run here and was skipped on purpose (the VM stage with BSZ_VM_OPTIONAL=1)

    @property
    def valid(self) -> bool:
        return self.error is None and self.data.get("valid") is True

    @property
    def failed_flags(self) -> list[str]:
        return sorted(k for k, v in (self.data.get("flags") or {}).items() if v is False)

    @property
    def outside(self) -> list[dict]:
        """The cautions that name a cause from outside the run."""
        return [c for c in self.data.get("cautions") or [] if c.get("check") in OUTSIDE]

    @property
    def disturbed(self) -> bool:
        return self.error is None and bool(self.outside)


def describe_outside(run: Run) -> str:
    """'hypervisor steal 6.1 % (limit 1 %), foreign CPU 5.5 % (limit 5 %: process_api pid 1 4.4 s)'."""
    parts = []
    for c in run.outside:
        what = "hypervisor steal" if c["check"] == "hypervisor_steal" else "foreign CPU"
        text = f"{what} {c['value']:.1%} (limit {c['limit']:.0%})"
        if c["check"] == "foreign_cpu":
            cpu = (run.data.get("monitors") or {}).get("cpu") or run.data.get("cpu") or {}  # a run's, or verify's
            top = (cpu.get("foreign") or {}).get("top") or []
            if top:
                text += ": " + ", ".join(f"{t['name']} pid {t['pid']} {t['cpu_s']:g} s" for t in top[:2])
        parts.append(text)
    return ", ".join(parts)


@dataclass
class Check:
    """What a claim's own check found on its runs: whether the claim holds, and the figures."""

    ok: bool
    figure: str


@dataclass(frozen=True)
class Claim:
    name: str
    says: str  # the claim, in one sentence
    runs: tuple[str, ...]  # the runs of its scenario it is checked on
    check: Callable[[dict[str, dict]], Check]  # on those runs' data, by name


@dataclass
class Verdict:
    claim: str
    verdict: str  # HELD, BROKEN or INCONCLUSIVE
    why: str  # the cause or the reason; empty when held
    figure: str
    attempts: int = 1  # the most times one of its runs was measured

    def line(self) -> str:
        why = f" ({self.why})" if self.why else ""
        return f"claim {self.claim}: {self.verdict}{why} {self.figure}".rstrip()

    def to_dict(self) -> dict:
        return {"claim": self.claim, "verdict": self.verdict, "why": self.why, "figure": self.figure,
                "attempts": self.attempts}  # fmt: skip


def figure_of(claim: Claim, runs: dict[str, Run]) -> Check | None:
    """The claim's check on runs that finished, or None where it cannot be made (a run failed, or its
    data lack what the check reads)."""
    try:
        return claim.check({n: runs[n].data for n in claim.runs})
    except (KeyError, TypeError, ValueError, ZeroDivisionError, IndexError):
        return None


def judge(claim: Claim, attempts: dict[str, Sequence[Run]]) -> Verdict:
    """The claim's verdict on the last attempt of each run it uses (earlier attempts were disturbed)."""
    runs = {n: attempts[n][-1] for n in claim.runs}
    tries = max(len(attempts[n]) for n in claim.runs)
    skipped = [r for r in runs.values() if r.skipped]
    if skipped:
        return Verdict(claim.name, NOT_JUDGED, f"skipped on purpose: {skipped[0].error}", "", tries)
    failed = [r for r in runs.values() if r.error is not None]
    if failed:
        return Verdict(claim.name, BROKEN, f"run {failed[0].name} did not finish: {failed[0].error}", "", tries)
    found = figure_of(claim, runs)
    figure = found.figure if found else "(no figure: the run's data lack it)"
    disturbed = [r for r in runs.values() if r.disturbed]
    if disturbed:
        cause = "; ".join(f"{r.name}: {describe_outside(r)}" for r in disturbed)
        flagged = [f"{r.name} flagged {', '.join(r.failed_flags)}" for r in disturbed if r.failed_flags]
        why = f"disturbed from outside in {tries} runs: {cause}" + (f"; {'; '.join(flagged)}" if flagged else "")
        return Verdict(claim.name, INCONCLUSIVE, why, figure, tries)
    flagged = [r for r in runs.values() if not r.valid]
    if flagged:
        what = "; ".join(f"{r.name} flagged {', '.join(r.failed_flags) or 'invalid'}" for r in flagged)
        return Verdict(claim.name, BROKEN, f"{what}, with no cause from outside measured", figure, tries)
    if found is None:
        return Verdict(claim.name, BROKEN, "its check could not be made on a valid run", figure, tries)
    return Verdict(claim.name, HELD if found.ok else BROKEN, "" if found.ok else "missed", figure, tries)


def measure_twice(run: Callable[[int], Run], say: Callable[[str], None]) -> list[Run]:
    """One run; once more when it was disturbed from outside (never a third time): the attempts."""
    first = run(1)
    if not first.disturbed:
        return [first]
    say(f"  {first.name}: disturbed from outside ({describe_outside(first)}): measured once more")
    return [first, run(2)]


def summary(verdicts: Sequence[Verdict]) -> str:
    counts = {v: sum(x.verdict == v for x in verdicts) for v in (HELD, BROKEN, INCONCLUSIVE, NOT_JUDGED)}
    text = f"claims: {counts[HELD]} held, {counts[BROKEN]} broken, {counts[INCONCLUSIVE]} inconclusive"
    return text + (f", {counts[NOT_JUDGED]} not judged (skipped on purpose)" if counts[NOT_JUDGED] else "")
