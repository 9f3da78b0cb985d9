"""The main job (`./setup.sh quick`): check the machine, verify the emulated path, run the quick replication."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from buffersizing.report import make_report
from buffersizing.resultdir import check_out_dir, read_finished
from buffersizing.sweep import SweepSpec, finished, make_spec, run_sweep
from buffersizing.verify import format_summary, run_verify
from topologies.config import DumbbellConfig
from topologies.machine import format_report, probe
from topologies.safefiles import write_atomic


def quick_spec() -> SweepSpec:
    """The same spec `bufsize sweep --preset quick` builds, so either command can resume the other's run."""
    return make_spec("quick", None, {}, {})


def quick_dir(base: Path, spec: SweepSpec) -> Path:
    """The main job's sweep directory: the latest one if it was cut short with the same settings (so
    re-running resumes it), else a new timestamped one (so a finished run is never overwritten)."""
    latest = base / "latest"
    if latest.is_dir():
        manifest = read_finished(latest / "manifest.json")
        same = manifest is not None and manifest.get("spec") == spec.to_dict()
        if same and not all(finished(latest, n, r) for n, r in spec.points()):
            return latest.resolve()
    d = base / time.strftime("%Y-%m-%d-%H%M%S")
    d.mkdir(parents=True)
    if latest.is_symlink() or not latest.exists():
        latest.unlink(missing_ok=True)
        latest.symlink_to(d.name)
    return d


def run_quick(given: str | Path) -> int:
    t0 = time.monotonic()
    spec = quick_spec()
    base = check_out_dir(given)
    out = quick_dir(base, spec)
    caps = probe()
    print(format_report(caps))
    write_atomic(out / "doctor.json", json.dumps(caps.to_dict(), indent=1) + "\n")
    if caps.problems:
        return 1
    cfg = DumbbellConfig(hosts=2, rtt_ms=[87.0, 87.0], cc=spec.cc)
    backend = cfg.backend()
    print(f"\n== verify: {cfg.hosts} hosts, RTT 87 ms, {cfg.rate_mbps:g} Mb/s")
    s = run_verify(cfg, backend, duration=5.0, out=out)
    print(format_summary(s))
    if not s["ok"]:
        print("the emulated path is not within tolerance; not running the sweep on it", file=sys.stderr)
        return 1
    print(f"\n== quick replication: N = {', '.join(map(str, spec.flows))}, cc {spec.cc}, into {out}/")
    res = run_sweep(out, spec, backend)
    paths = make_report(out) if res["finished"] else []
    for path in paths:
        print(f"wrote {path}")
    write_atomic(out / "wall_seconds.txt", f"{time.monotonic() - t0:.0f}\n")
    if paths:
        print("\n" + (out / "table.md").read_text())
    print(f"main job finished in {(time.monotonic() - t0) / 60:.1f} min; results in {out}/")
    return 0 if not res["failed"] else 1
