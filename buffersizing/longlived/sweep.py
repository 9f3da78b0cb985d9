"""A sweep: one search per (N, run), each in its own directory, resumable.

    SWEEP/manifest.json           the sweep's settings and the machine it ran on
    SWEEP/n0010-run1/...          one point (points.py)

Points run in run-major order (every N of run 1, then run 2, ...), so a sweep stopped early still
has a whole curve. A point is finished when its result.json exists; re-running the same command
skips those, so a killed sweep loses at most the point it was in.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar, Protocol

from bufsize.longlived.dynamics import estimate_search_seconds
from bufsize.longlived.points import Sweep, Task, clock, finished, point_dir, run_points
from bufsize.longlived.presets import DEFAULT_PRESET, preset
from bufsize.longlived.search import FirstGuess, SearchOptions, check_search, default_samples, run_search
from bufsize.monitors.cpu import SAMPLE_STEAL_LIMIT
from bufsize.scaffold.cluster import Where
from bufsize.scaffold.lists import parse_flow_list
from bufsize.scaffold.manifest import machine_manifest
from bufsize.scaffold.resultdir import check_out_dir, read_finished, write_json_atomic
from bufsize.scaffold.runs import Emulated
from bufsize.scaffold.schema import stamp
from bufsize.topologies.config import PACER_DEFAULT, DumbbellConfig, parse_rtts, resolve_shaper
from bufsize.topologies.errors import UsageError
from bufsize.topologies.safefiles import read_bounded
from bufsize.topologies.units import digits
from bufsize.traffic.longflows import MAX_FLOWS


@dataclass
class SweepSpec:
    flows: list[int]
    runs: int
    max_hosts: int  # each point uses min(N, max_hosts) sender hosts
    rate_mbps: float
    rtt_ms: str  # as given: '87', or a range spread over each point's hosts
    cc: str
    shaper: str
    burst_bytes: int | None
    delay_backend: str
    access_mbps: float
    pacer: bool = PACER_DEFAULT  # absent from specs written before the pacer: its default then
    loss_recovery: str = "linux"  # absent from specs written before the option: the kernel's then
    delayed_ack: bool = True  # likewise
    sender_pacing: bool = False  # likewise
    search: dict = field(default_factory=dict)  # SearchOptions fields other than flows
    preset: str | None = None
    runs_key: ClassVar[str] = "runs"
    run_name: ClassVar[str] = "run"

    def validate(self) -> None:
        if not self.flows:
            raise UsageError("--flows: give at least one number of flows")
        for n in self.flows:
            if not 1 <= n <= MAX_FLOWS:
                raise UsageError(f"--flows {n}: each must be from 1 to {MAX_FLOWS}")
        if len(set(self.flows)) != len(self.flows):
            raise UsageError("--flows: a number of flows is listed twice")
        if not 1 <= self.runs <= 100:
            raise UsageError(f"--runs {self.runs}: must be from 1 to 100")
        if not 1 <= self.max_hosts <= 400:
            raise UsageError(f"--hosts {self.max_hosts}: must be from 1 to 400")
        for n in self.flows:
            cfg = self.config(n)
            cfg.validate()
            check_search(cfg, Emulated(cfg.delay_backend), self.options(n))

    def config(self, flows: int) -> DumbbellConfig:
        hosts = min(flows, self.max_hosts)
        return DumbbellConfig(
            hosts=hosts,
            rate_mbps=self.rate_mbps,
            rtt_ms=parse_rtts(self.rtt_ms, hosts),
            shaper=self.shaper,
            burst_bytes=self.burst_bytes,
            delay_backend=self.delay_backend,
            cc=self.cc,
            access_mbps=self.access_mbps,
            pacer=self.pacer,
            loss_recovery=self.loss_recovery,
            delayed_ack=self.delayed_ack,
            sender_pacing=self.sender_pacing,
        )

    def options(self, flows: int) -> SearchOptions:
        return SearchOptions(flows=flows, **self.search)

    def points(self) -> list[tuple[int, int]]:
        return [(n, r) for r in range(1, self.runs + 1) for n in self.flows]

    def estimate(self, flows: int) -> float:
        o = self.options(flows)
        rtt = max(parse_rtts(self.rtt_ms, min(flows, self.max_hosts)))
        return estimate_search_seconds(self.cc, flows, self.rate_mbps, rtt, o.samples, o.settle_s, o.sample_s)

    def to_dict(self) -> dict:
        return asdict(self)

    def made_before(self, old: dict, machine: dict) -> dict:
        """A manifest's spec with what it ran where it predates a setting: auto was pinned to the shaper it
        ran, and options added since ran with the kernel's or the search's defaults of then."""
        if old.get("shaper") == "auto" and isinstance(machine, dict) and machine.get("shaper") == self.shaper:
            old["shaper"] = self.shaper
        old = {"loss_recovery": "linux", "delayed_ack": True, "sender_pacing": False} | old
        if isinstance(old.get("search"), dict):
            # Samples were the model's cycle long before --sample-length existed, and every one counted
            # before --max-sample-steal; --precision was off.
            then = SEARCH_DEFAULTS | {"sample_length": "model", "max_sample_steal": 0.0}
            old["search"] = {k: v for k, v in then.items() if k not in old["search"]} | old["search"]
        return old


SEARCH_DEFAULTS = {
    "target": 0.99,
    "relative_to": "reference",
    "samples": 5,
    "settle_s": None,
    "sample_s": None,
    "sample_length": "measured",
    "resolution": 0.05,
    "max_samples": 0,
    "alpha": 0.05,
    "precision": 0.0,
    "level": 0.9,
    "max_buffer_packets": None,
    "first_guess": True,
    "tool": "iperf",
    "fidelity_s": 2.0,
    "max_sample_steal": SAMPLE_STEAL_LIMIT,
}
LINK_DEFAULTS = {"shaper": "auto", "burst_bytes": None, "delay_backend": "auto", "access_mbps": 1000.0,
                 "loss_recovery": "linux"}  # fmt: skip


def search_rule(pre: dict, given: dict) -> dict:
    """The search options of a preset (`pre`, {} for none) with the command line's over them (None: not
    given). A search and a sweep's points resolve their rule here, on either link."""
    opts = SEARCH_DEFAULTS | {k: v for k, v in given.items() if v is not None}
    for key in ("target", "samples", "resolution", "max_samples", "sample_length", "precision"):
        if given.get(key) is None and pre.get(key) is not None:  # fig11's 98 %, a preset's rule, ...
            opts[key] = pre[key]
    if opts["precision"]:
        # The precision rule replaces a preset's sequential test, and was tuned with 3 samples a probe.
        if given.get("max_samples") is None:
            opts["max_samples"] = 0
        if given.get("samples") is None:
            opts["samples"] = default_samples(opts["precision"])
    return opts


def make_spec(preset_name: str | None, flows: list[int] | None, overrides: dict, search: dict) -> SweepSpec:
    """A sweep from a preset (or none), the command line's overrides (None: not given) and search options.
    Without a named preset, the published figures' method (DEFAULT_PRESET) over the given --flows,
    one run each unless --runs says."""
    named = preset_name is not None
    if flows is None and not named:
        raise UsageError("give --flows (for example 2,10,50,200,800) or a --preset")
    pre = preset(preset_name if named else DEFAULT_PRESET)

    def pick(key: str, default: object) -> object:
        given = overrides.get(key)
        return given if given is not None else pre.get(key, default)

    rule = ("samples", "resolution", "max_samples", "sample_length")
    spec = SweepSpec(
        flows=flows if flows is not None else pre["flows"],
        runs=pick("runs", 1) if named or overrides.get("runs") is not None else 1,
        max_hosts=pick("max_hosts", 400),
        rate_mbps=pick("rate_mbps", 62.5),
        rtt_ms=pick("rtt_ms", "87"),
        cc=pick("cc", "reno"),
        # A preset names its shaper; the other link settings come from the command line or defaults.
        shaper=pinned_shaper(pick("shaper", LINK_DEFAULTS["shaper"]), overrides.get("delay_backend", "auto")),
        **{k: overrides.get(k, v) for k, v in LINK_DEFAULTS.items() if k != "shaper"},
        pacer=overrides.get("pacer", "on" if PACER_DEFAULT else "off") == "on",
        delayed_ack=overrides.get("delayed_ack", "on") != "off",
        sender_pacing=overrides.get("sender_pacing") == "on",
        search=search_rule(pre, search | {k: overrides.get(k) for k in rule}),
        preset=preset_name if named else DEFAULT_PRESET,
    )
    spec.validate()
    return spec


def pinned_shaper(shaper: str, delay_backend: str) -> str:
    """A sweep names the shaper it runs in its spec, so that resuming it, or running its points on other
    machines (bufsize remote), uses the same method: auto is pinned to the line it stands for."""
    if shaper == "auto" and delay_backend == "netem":
        resolve_shaper(shaper, delay_backend)  # refuses, with the reason: the line needs the delay line
    return "line" if shaper == "auto" else shaper


def spec_from_args(a: argparse.Namespace, flows: list[int] | None = None) -> SweepSpec:
    """The sweep the options of options.add_sweep_args describe (bufsize sweep and bufsize remote), or,
    with `flows`, the one point a search runs (bufsize search: its --hosts is the sweep's most hosts)."""
    if flows is None and a.flows is not None:
        flows = parse_flow_list(a.flows)
    keys = ("runs", "rate_mbps", "rtt_ms", "cc", "shaper", "burst_bytes", "delay_backend", "access_mbps", "pacer")
    keys += ("loss_recovery", "delayed_ack", "sender_pacing", "samples", "resolution", "max_samples", "sample_length")
    overrides = {k: getattr(a, k, None) for k in keys} | {"max_hosts": a.hosts}
    search = {"target": a.target, "relative_to": a.relative_to, "settle_s": a.settle_s, "sample_s": a.sample_s,
              "alpha": a.alpha, "precision": a.precision, "level": a.level,
              "max_buffer_packets": a.max_buffer_packets, "first_guess": not a.no_first_guess,
              "tool": a.tool, "fidelity_s": a.fidelity_s, "max_sample_steal": a.max_sample_steal}  # fmt: skip
    return make_spec(a.preset, flows, overrides, search)


def parse_points(text: str, spec: SweepSpec) -> list[tuple[int, int]]:
    """`--points 2:1,10:1`: a subset of the sweep's (N, run) points, each one of them, none twice."""
    points: list[tuple[int, int]] = []
    for part in text.split(","):
        n, sep, r = part.strip().partition(":")
        if not (sep and digits(n) and digits(r)):
            raise UsageError(f"--points {text}: expected N:run pairs separated by commas, like 2:1,10:1")
        point = (int(n), int(r))
        if point not in spec.points():
            raise UsageError(f"--points {text}: N={n} run {r} is not a point of this sweep (its --flows and --runs)")
        if point in points:
            raise UsageError(f"--points {text}: N={n} run {r} is listed twice")
        points.append(point)
    return points


def sweep_guess(out: Path, spec: SweepSpec, flows: int, run: int) -> FirstGuess | None:
    """A first probe from this sweep's converged answers: the median of the other
    runs at the same N, else the nearest N's median scaled by sqrt(N'/N): from each N to the next, that
    came within a factor 1.3 of the committed full sweep's medians (107 at N = 2 gives 68 at N = 5,
    where 62 was measured; 11 at 100 gives 7.8 at 200, measured 8). None before any answer."""
    answers: dict[int, list[int]] = {}
    for m, r in spec.points():
        res = read_finished(point_dir(out, m, r) / "result.json")
        if (m, r) == (flows, run) or res is None or res.get("flows") != m or "buffer_packets" not in res:
            continue
        if (res.get("flags") or {}).get("converged"):
            answers.setdefault(m, []).append(int(res["buffer_packets"]))
    if flows in answers:
        same = answers[flows]
        return FirstGuess(round(statistics.median(same)), f"the median of this sweep's {len(same)} runs at N={flows}")
    if not answers:
        return None
    near = min(answers, key=lambda m: (abs(math.log(m / flows)), m))
    packets = statistics.median(answers[near]) * math.sqrt(near / flows)
    return FirstGuess(max(1, round(packets)), f"this sweep's answer at N={near} x sqrt({near}/{flows})")


def sweep_shapers(spec: SweepSpec, backend: str) -> str:
    """The shaper every point of the sweep uses (one: the spec names it, auto pinned to the line)."""
    return resolve_shaper(spec.shaper, backend)


class SweepSpecLike(Protocol):
    """What the sweep asks of a link's sweep settings (SweepSpec here, the twin's SimSweepSpec)."""

    runs_key: ClassVar[str]  # the spec's key for runs a point ("seeds" on the twin: run r is seed r)
    run_name: ClassVar[str]

    @property
    def runs(self) -> int: ...
    def points(self) -> list[tuple[int, int]]: ...
    def validate(self) -> None: ...
    def to_dict(self) -> dict: ...
    def made_before(self, old: dict, machine: dict) -> dict: ...


def existing_manifest(out: Path, spec: SweepSpecLike) -> dict | None:
    """The manifest of a sweep already in `out` (None if there is none), refused unless the same
    settings made it (a sweep, on either link, and bufsize remote resume only their own sweep). The one
    change let through is more runs a point: the same sweep, whose finished runs stay valid."""
    path = out / "manifest.json"
    if not path.exists():
        return None
    try:
        manifest = json.loads(read_bounded(path))
        old = spec.made_before(dict(manifest["spec"]), manifest.get("machine") or {})
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        detail = " ".join(str(e).split())[:200]
        raise UsageError(f"{path} is not a sweep manifest ({detail}); choose another --out") from e
    now, runs = spec.to_dict(), spec.runs_key
    if old | {runs: now[runs]} == now and isinstance(old.get(runs), int) and old[runs] < now[runs]:
        return manifest  # more runs of the same sweep: its finished runs stay valid, open_sweep records it
    if old != now:
        # A key is named as a Python string where it is not a plain name: a manifest's keys are the file's.
        diff = sorted(k if str(k).isidentifier() else repr(k) for k in set(old) | set(now) if old.get(k) != now.get(k))
        search = old.get("search") if isinstance(old.get("search"), dict) else {}
        detail = [f"{k} was {search.get(k)!r}, now {v!r}" for k, v in now["search"].items() if search.get(k) != v]
        raise UsageError(
            f"{out} holds a sweep with different settings ({', '.join(diff)}"
            + (f": {'; '.join(detail)}" if "search" in diff and detail else "")
            + "); re-run the same command to resume it, or choose another --out"
        )
    return manifest


def grown_manifest(manifest: dict, spec: SweepSpecLike) -> dict:
    """`manifest` with `spec`'s settings, and a `runs_added` entry where `spec` has more runs a point
    (the one change existing_manifest lets through); local and remote sweeps both record it here."""
    before, now = (manifest.get("spec") or {}).get(spec.runs_key), spec.to_dict()[spec.runs_key]
    added = list(manifest.get("runs_added") or [])
    if isinstance(before, int) and before < now:
        added.append({"from": before, "to": now, "at": datetime.now(UTC).isoformat(timespec="seconds")})
    return manifest | {"spec": spec.to_dict()} | ({"runs_added": added} if added else {})


def check_same_shaper(manifest: dict, now: str, allow_mixed: bool) -> None:
    """Refuse to resume a sweep whose finished points used another shaper than this run would."""
    machine = manifest.get("machine")
    before = machine.get("shaper") if isinstance(machine, dict) else None
    if before is None or before == now or allow_mixed:
        return
    raise UsageError(
        f"this sweep's points so far used the shaper '{before}' and this run would use '{now}': a curve from "
        "two shapers mixes two methods; resume it where it began, or pass --allow-mixed-shapers"
    )


@dataclass
class PointRunner:
    """How a sweep's points run on its link: one point's search (its result.json in the point's
    directory, or raise), what the manifest records of the machine, the check before resuming, the
    estimate of a point's time (None: none), and where they run (None: one at a time in this process;
    else on the Dask cluster it names)."""

    search: Task
    machine: Callable[[], dict]
    intro: str
    where: Where | None = None
    resumed: Callable[[dict], None] = lambda manifest: None
    estimate: Callable[[int], float] | None = None


def open_sweep(out: Path, spec: SweepSpecLike, runner: PointRunner) -> None:
    """Create the sweep directory, or check that an existing one was made by the same command."""
    check_out_dir(out)
    path = out / "manifest.json"
    manifest = existing_manifest(out, spec)
    if manifest is not None:
        runner.resumed(manifest)
        if manifest["spec"].get(spec.runs_key) != spec.to_dict()[spec.runs_key]:  # only more runs got through
            write_json_atomic(path, stamp(grown_manifest(manifest, spec), "sweep-manifest"))
        return
    write_json_atomic(path, stamp({"spec": spec.to_dict(), "machine": runner.machine()}, "sweep-manifest"))


def run_sweep(
    out: Path,
    spec: SweepSpecLike,
    runner: PointRunner,
    say: Callable[[str], None],
    only: list[tuple[int, int]] | None = None,
) -> dict:
    """Every point of the sweep, or `only` those (another machine runs the rest), on either link
    (points.run_points). One at a time, run-major, so a sweep stopped early still has a whole curve;
    on several workers the largest N first, which take longest, so that none is left alone at the end."""
    spec.validate()
    open_sweep(out, spec, runner)
    say(runner.intro)
    points = [p for p in spec.points() if only is None or p in only]
    if runner.where is not None:
        points.sort(key=lambda p: (-p[0], p[1]))
    return run_points(Sweep(out, points, spec.runs, runner.estimate, spec.run_name), runner.search, say, runner.where)


def emulated_runner(
    out: Path, spec: SweepSpec, backend: str, say: Callable[[str], None], allow_mixed_shapers: bool = False
) -> PointRunner:
    """An emulated sweep's points: one at a time in this process (each needs the whole machine),
    each search's first probe from the sweep's answers so far (sweep_guess)."""
    shaper = sweep_shapers(spec, backend)

    def search(n: int, r: int, d: Path) -> None:
        run_search(spec.config(n), Emulated(backend, d, say), spec.options(n), hint=sweep_guess(out, spec, n, r))

    return PointRunner(
        search,
        lambda: machine_manifest(backend, spec.cc, shaper),
        f"shaper: {shaper}, delay backend: {backend}",
        resumed=lambda manifest: check_same_shaper(manifest, shaper, allow_mixed_shapers),
        estimate=spec.estimate,
    )


def plan(out: Path | None, spec: SweepSpec, backend: str | None, only: list[tuple[int, int]] | None = None) -> dict:
    """What `run_sweep` would do in `out` (None: a new sweep, directory not chosen yet), built from the
    spec and the directory alone: nothing is created or started. The estimate is the same model the
    progress bar starts from (dynamics.py), before this machine has timed a point; the committed
    sweeps' wall times are in docs/findings.md."""
    exists = out is not None and out.exists()
    if exists:
        existing_manifest(out, spec)  # a sweep of other settings there is refused now, as the run would
    rows = []
    for n, r in (p for p in spec.points() if only is None or p in only):
        cfg = spec.config(n)
        rows.append({
            "flows": n, "run": r, "hosts": cfg.hosts, "rtt_ms": sorted(set(cfg.rtt_ms)),
            "dir": str(point_dir(out or Path("OUT"), n, r)), "finished": exists and finished(out, n, r),
            "estimate_s": round(spec.estimate(n)),
        })  # fmt: skip
    pending = sum(row["estimate_s"] for row in rows if not row["finished"])
    return {
        "out": str(out) if out is not None else None,
        "spec": spec.to_dict(),
        "shaper": spec.shaper,
        "delay_backend": backend or "decided when the run starts (probing the kernel needs root)",
        "points": rows,
        "pending_points": sum(not row["finished"] for row in rows),
        "estimate_s": pending,
        "estimate": clock(pending),
        "estimate_basis": "model of dynamics.py, before any point is timed on this machine",
    }


def format_plan(p: dict) -> str:
    spec = p["spec"]
    lines = [
        f"sweep into {p['out'] + '/' if p['out'] else 'a new directory (give --out to run it)'}"
        " (nothing is built by --dry-run)",
        f"  {spec['cc']} flows over {spec['rate_mbps']:g} Mb/s, RTT {spec['rtt_ms']} ms, shaper {p['shaper']}, "
        f"delay {p['delay_backend']}; target {spec['search']['target']:g}, {spec['search']['samples']} samples",
        f"  {'N':>5} {'run':>4} {'hosts':>6} {'estimate':>9}  state",
    ]
    for row in p["points"]:
        state = "finished (skipped)" if row["finished"] else "to run"
        lines.append(f"  {row['flows']:>5} {row['run']:>4} {row['hosts']:>6} {clock(row['estimate_s']):>9}  {state}")
    lines.append(
        f"  {p['pending_points']} of {len(p['points'])} points to run, about {p['estimate']} ({p['estimate_basis']})"
    )
    return "\n".join(lines)
