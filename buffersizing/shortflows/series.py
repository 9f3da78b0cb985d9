"""A named short-flow experiment as a series of points in one directory, resumable, on either link:
each point a `shortflows` run on the emulated dumbbell, or the same workload on the ns-3 twin.

Each point runs into DIR/<point>/; re-running the same command skips finished points, and a
directory made with other settings is refused (DIR/series.json holds them). After the points, the
experiment writes its table and figure (its report()); wall times are appended to wall_seconds.txt.
"""

from __future__ import annotations

import csv
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from bufsize.scaffold.cautions import table_note
from bufsize.scaffold.experiment import Say, stderr_say
from bufsize.scaffold.manifest import machine_manifest
from bufsize.scaffold.resultdir import read_finished, write_json_atomic
from bufsize.shortflows.run import ShortFlowOptions, run_shortflows
from bufsize.topologies.config import DumbbellConfig
from bufsize.topologies.errors import UsageError
from bufsize.topologies.safefiles import atomic_text, make_dirs, open_new, write_atomic

Point = tuple[str, DumbbellConfig, int, ShortFlowOptions]  # name, link, buffer bytes, workload


class SeriesSpec(Protocol):
    """A named experiment: its points and its report (`where` names the link in the figure's title;
    the experiments that run on the emulated link alone leave it out)."""

    experiment: str
    cc: str

    def validate(self) -> None: ...
    def points(self) -> list[Point]: ...
    def report(self, out: Path, where: str = "this testbed") -> int: ...


class SeriesLink(Protocol):
    """The link a series' points run on: the emulated dumbbell (EmulatedPoints) or the ns-3 twin
    (sim/shortexp.py TwinPoints)."""

    where: str  # how the report's title names it
    header: dict  # series.json's keys beside the experiment and its spec, the same on a resume

    def manifest(self, spec: SeriesSpec) -> dict: ...

    def run_point(self, cfg: DumbbellConfig, buffer_bytes: int, opts: ShortFlowOptions, d: Path, log: Say) -> None:
        """Run one point and write its result.json into `d`, or raise."""
        ...


@dataclass
class EmulatedPoints:
    """Each point a `shortflows` run on the emulated dumbbell, with this delay backend."""

    backend: str
    where: str = "this testbed"
    header: dict = field(default_factory=dict)

    def manifest(self, spec: SeriesSpec) -> dict:
        return machine_manifest(self.backend, spec.cc)

    def run_point(self, cfg: DumbbellConfig, buffer_bytes: int, opts: ShortFlowOptions, d: Path, log: Say) -> None:
        run_shortflows(cfg, self.backend, buffer_bytes, opts, d, log=lambda s: log("  " + s))


def open_series(out: Path, spec: SeriesSpec, on: SeriesLink) -> None:
    path = out / "series.json"
    mine = {"experiment": spec.experiment, "spec": asdict(spec)} | on.header  # type: ignore[call-overload]
    if path.exists():
        old = read_finished(path)  # bounded, a regular file, a JSON object; else None
        if old is None or not isinstance(old.get("spec") or {}, dict):
            raise UsageError(f"{path} is not a series file; choose another --out")
        # A setting added since the directory was made reads as its default (it was the only value then);
        # every other key but the machine must match, so that neither link resumes the other's series.
        old_spec = asdict(type(spec)()) | (old.get("spec") or {})  # type: ignore[call-overload]
        if {k: v for k, v in old.items() if k != "machine"} | {"spec": old_spec} != mine:
            raise UsageError(f"{out} holds a series with other settings; re-run its command or choose another --out")
        return
    write_json_atomic(path, mine | {"machine": on.manifest(spec)})


def run_series(out: Path, spec: SeriesSpec, on: SeriesLink, say: Say | None = None) -> dict:
    """Every point not finished yet, one after another, on the link `on`: a point's failure is said (its
    error.json is its own) and the series goes on; then the experiment's table and figure."""
    log = say or stderr_say
    spec.validate()
    make_dirs(out)
    open_series(out, spec, on)
    t0 = time.monotonic()
    points = spec.points()
    failed = []
    for i, (name, cfg, buffer_bytes, opts) in enumerate(points, 1):
        d = out / name
        if read_finished(d / "result.json") is not None:
            continue
        log(f"[{i}/{len(points)}] {name} | elapsed {time.monotonic() - t0:.0f} s")
        make_dirs(d)
        try:
            on.run_point(cfg, buffer_bytes, opts, d, log)
        except Exception as e:  # one point's failure: go on with the rest
            log(f"  {name} failed: {type(e).__name__}: {e}")
            failed.append(f"{name}: {e}")
    wall = time.monotonic() - t0
    finished = spec.report(out, on.where)
    with open_new(out / "wall_seconds.txt", append=True) as f:
        f.write(f"{round(wall)}\n")
    return {"points": len(points), "finished": finished, "failed": failed, "wall_seconds": round(wall)}


def write_table(out: Path, rows: list[dict], markdown: list[str], draw: Callable[[], None], what: str) -> None:
    """An experiment's table.csv (every field of every row), table.md and figure; a figure that
    cannot be drawn is said, not raised (the tables are the results)."""
    with atomic_text(out / "table.csv") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    found = {f.parent.name: (read_finished(f) or {}).get("cautions") for f in out.glob("*/result.json")}
    cautioned = sorted(name for name, c in found.items() if c)
    checks = {c.get("check") for cs in found.values() for c in cs or []}
    note = ["", table_note(cautioned, checks)] if cautioned else []
    write_atomic(out / "table.md", "\n".join(markdown + note) + "\n")
    try:
        draw()
    except Exception as e:  # noqa: BLE001 - a figure is a convenience
        print(f"{what} figure not drawn: {type(e).__name__}: {e}", file=sys.stderr)


def finished_points(out: Path, spec: SeriesSpec) -> list[tuple[str, DumbbellConfig, int, dict]]:
    """(name, link, buffer bytes, result) of every point that has a result, in the spec's order."""
    done = []
    for name, cfg, buffer_bytes, _opts in spec.points():
        r = read_finished(out / name / "result.json")
        if r is not None:
            done.append((name, cfg, buffer_bytes, r))
    return done
