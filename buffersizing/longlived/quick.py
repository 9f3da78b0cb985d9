"""The main job (`./setup.sh quick`): check the machine, verify the emulated path, run the quick replication."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from bufsize.longlived.report import make_report
from bufsize.longlived.sweep import SweepSpec, clock, emulated_runner, finished, format_plan, make_spec, plan, run_sweep
from bufsize.longlived.verify import format_summary, run_verify
from bufsize.scaffold.display import Display
from bufsize.scaffold.resultdir import check_out_dir, read_finished
from bufsize.topologies.config import DumbbellConfig
from bufsize.topologies.machine import format_report, probe
from bufsize.topologies.safefiles import write_atomic


def quick_spec() -> SweepSpec:
    """The same spec `bufsize sweep --preset quick` builds, so either command can resume the other's run."""
    return make_spec("quick", None, {}, {})


def cut_short_latest(base: Path, spec: SweepSpec) -> Path | None:
    """The latest run, if it was cut short with the same settings (re-running resumes it)."""
    latest = base / "latest"
    if not latest.is_dir():
        return None
    manifest = read_finished(latest / "manifest.json")
    same = manifest is not None and manifest.get("spec") == spec.to_dict()
    return latest.resolve() if same and not all(finished(latest, n, r) for n, r in spec.points()) else None


def quick_dir(base: Path, spec: SweepSpec) -> Path:
    """The main job's sweep directory: the latest one if it was cut short with the same settings (so
    re-running resumes it), else a new timestamped one (so a finished run is never overwritten)."""
    resumed = cut_short_latest(base, spec)
    if resumed is not None:
        return resumed
    latest = base / "latest"
    d = base / time.strftime("%Y-%m-%d-%H%M%S")
    d.mkdir(parents=True)
    if latest.is_symlink() or not latest.exists():
        latest.unlink(missing_ok=True)
        latest.symlink_to(d.name)
    return d


def earlier_minutes(base: Path, spec: SweepSpec) -> list[float]:
    """The wall times, in minutes, of the finished runs in `base` with these settings (the committed
    ones in results/quick, and any made here since): what the plan quotes beside its own estimate.
    Runs of other settings (the quick preset before N = 2 was dropped) are not counted."""
    minutes = []
    for d in sorted(base.iterdir()) if base.is_dir() else []:
        if d.is_symlink() or not d.is_dir():
            continue  # `latest`, or anything planted: only the runs themselves
        manifest = read_finished(d / "manifest.json")
        if manifest is None or manifest.get("spec") != spec.to_dict():
            continue
        if not all(finished(d, n, r) for n, r in spec.points()):
            continue
        try:
            wall = float((d / "wall_seconds.txt").read_text().strip())
        except (OSError, ValueError):
            continue
        minutes.append(wall / 60)
    return minutes


def runs_took(minutes: list[float], where: list[Path]) -> str:
    if not minutes:
        return ""
    lo, hi = min(minutes), max(minutes)
    span = f"{lo:.1f} min" if f"{lo:.1f}" == f"{hi:.1f}" else f"{lo:.1f} to {hi:.1f} min"
    dirs = " and ".join(f"{d}/" for d in where)
    return f"; its {len(minutes)} finished run{'s' * (len(minutes) > 1)} in {dirs} took {span}"


VERIFY_S = 5.0


def plan_quick(given: str | Path, reference: Path | None = None) -> dict:
    """What `run_quick` would do, building and writing nothing: the directory it would use (the cut-short
    latest run it would resume, or a new one), the verify step, and the sweep's plan with its estimate,
    beside the wall times of earlier runs here and in `reference` (the committed runs)."""
    spec = quick_spec()
    base = check_out_dir(given, create=False)
    resumed = cut_short_latest(base, spec)
    resume = resumed is not None
    out = resumed or base / time.strftime("%Y-%m-%d-%H%M%S")
    sweep = plan(out, spec, None)
    setup_s = VERIFY_S + 20  # doctor, building the verify dumbbell, its RTT and rate tests
    where = [base] + ([reference] if reference is not None and reference.resolve() != base.resolve() else [])
    per_dir = [(d, earlier_minutes(d, spec)) for d in where]
    earlier = [m for _, ms in per_dir for m in ms]
    total = sweep["estimate_s"] + setup_s
    text = "\n".join([
        f"the main job: doctor, verify ({VERIFY_S:g} s of rate test on 2 hosts at RTT 87 ms), then the quick sweep",
        f"into {out}/" + (" (resuming the cut-short latest run)" if resume else " (a new directory)"),
        format_plan(sweep),
        f"about {clock(total)} in all ({sweep['estimate_basis']}{runs_took(earlier, [d for d, ms in per_dir if ms])})",
    ])  # fmt: skip
    return {"out": str(out), "resume": resume, "verify_s": VERIFY_S, "sweep": sweep, "estimate_s": total,
            "earlier_runs_min": [round(m, 1) for m in earlier], "text": text}  # fmt: skip


def run_quick(given: str | Path) -> tuple[int, Path | None]:
    """The main job; its exit status and the run's directory (None when it stopped before making one)."""
    t0 = time.monotonic()
    spec = quick_spec()
    base = check_out_dir(given)
    out = quick_dir(base, spec)
    caps = probe()
    print(format_report(caps))
    write_atomic(out / "doctor.json", json.dumps(caps.to_dict(), indent=1) + "\n")
    if caps.problems:
        return 1, out
    cfg = DumbbellConfig(hosts=2, rtt_ms=[87.0, 87.0], cc=spec.cc)
    backend = cfg.backend()
    print(f"\n== verify: {cfg.hosts} hosts, RTT 87 ms, {cfg.rate_mbps:g} Mb/s")
    s = run_verify(cfg, backend, duration=VERIFY_S, out=out)
    print(format_summary(s))
    if not s["ok"]:
        print("the emulated path is not within tolerance; not running the sweep on it", file=sys.stderr)
        return 1, out
    print(f"\n== quick replication: N = {', '.join(map(str, spec.flows))}, cc {spec.cc}, into {out}/")
    say = Display()
    res = run_sweep(out, spec, emulated_runner(out, spec, backend, say), say)
    paths = make_report(out) if res["finished"] else []
    for path in paths:
        print(f"wrote {path}")
    write_atomic(out / "wall_seconds.txt", f"{time.monotonic() - t0:.0f}\n")
    if paths:
        print("\n" + (out / "table.md").read_text())
    print(f"main job finished in {(time.monotonic() - t0) / 60:.1f} min; results in {out}/")
    return (0 if not res["failed"] else 1), out
