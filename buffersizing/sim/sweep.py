"""A sweep on the simulator twin: one search per (N, seed), each in its own directory, resumable,
several at a time as tasks on Dask workers (one each: a simulation is single-threaded and needs no
other resource, and no root).

The layout is the emulated sweep's (SWEEP/manifest.json, SWEEP/n0010-run1/result.json), so `bufsize
plot` draws it and `bufsize plot EMULATED --with-sim SWEEP` overlays it; run r is seed r. Each point
starts from its congestion control's rule, never from the sweep's other answers as the emulated
sweep does: points run concurrently, and a point's answer must depend on (N, seed) alone, not on
which other points happened to finish first.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bufsize.longlived.points import Sweep, run_points
from bufsize.longlived.search import SearchOptions
from bufsize.scaffold.display import Display
from bufsize.scaffold.resultdir import check_out_dir, write_json_atomic
from bufsize.scaffold.schema import stamp
from bufsize.sim.search import check_start_buffer, run_sim_search, simulator_manifest, validate
from bufsize.topologies.config import parse_rtts
from bufsize.topologies.errors import UsageError
from bufsize.topologies.nssim import MAX_SIM_HOSTS, SimConfig
from bufsize.topologies.safefiles import open_new, read_bounded


@dataclass
class SimSweepSpec:
    flows: list[int]
    seeds: int
    max_hosts: int
    rate_mbps: float
    rtt_ms: str
    cc: str
    access_mbps: float
    search: dict = field(default_factory=dict)  # SearchOptions fields other than flows
    delayed_ack: bool = True  # absent from sweeps made before the option: on, as they ran
    start_buffer: str = "calibration"  # absent from sweeps made before the option: as they ran
    sender_pacing: bool = False  # likewise: unpaced
    start_spread_s: float = 1.0  # likewise: over 1 s

    def config(self, flows: int, seed: int) -> SimConfig:
        hosts = min(flows, self.max_hosts)
        rtts = parse_rtts(self.rtt_ms, hosts)
        return SimConfig(hosts, self.rate_mbps, rtts, self.cc, self.access_mbps, seed, delayed_ack=self.delayed_ack,
                         sender_pacing=self.sender_pacing, start_spread_s=self.start_spread_s)  # fmt: skip

    def options(self, flows: int) -> SearchOptions:
        return SearchOptions(flows=flows, **self.search)

    def points(self) -> list[tuple[int, int]]:
        return [(n, s) for s in range(1, self.seeds + 1) for n in self.flows]

    def validate(self) -> None:
        if not self.flows or len(set(self.flows)) != len(self.flows):
            raise UsageError("--flows: give each number of flows once")
        if not 1 <= self.seeds <= 100:
            raise UsageError(f"--seeds {self.seeds}: must be from 1 to 100")
        check_start_buffer(self.start_buffer)
        if not 1 <= self.max_hosts <= MAX_SIM_HOSTS:
            raise UsageError(f"--hosts {self.max_hosts}: must be from 1 to {MAX_SIM_HOSTS}")
        for n in self.flows:
            validate(self.config(n, 1), self.options(n))

    def to_dict(self) -> dict:
        return asdict(self)


def open_sim_sweep(out: Path, spec: SimSweepSpec) -> None:
    check_out_dir(out)
    path = out / "manifest.json"
    if path.exists():
        try:
            made_before = {
                "delayed_ack": True,
                "start_buffer": "calibration",
                "sender_pacing": False,
                "start_spread_s": 1.0,
            }
            old = made_before | json.loads(read_bounded(path))["spec"]
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
            raise UsageError(f"{path} is not a sweep manifest; choose another --out") from e
        if old != spec.to_dict():
            diff = sorted(k for k in set(old) | set(spec.to_dict()) if old.get(k) != spec.to_dict().get(k))
            raise UsageError(f"{out} holds a twin sweep with other settings ({', '.join(diff)}); choose another --out")
        return
    write_json_atomic(
        path,
        stamp({"spec": spec.to_dict(), "machine": simulator_manifest(spec.config(spec.flows[0], 1))}, "sweep-manifest"),
    )


def check_jobs(jobs: int) -> None:
    if not 1 <= jobs <= 64:
        raise UsageError(f"--workers (--jobs) {jobs}: must be from 1 to 64")


def default_jobs() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def run_sim_sweep(out: Path, spec: SimSweepSpec, jobs: int, say: Callable[[str], None] | None = None) -> dict:
    """Every (N, seed) not finished yet, `jobs` at a time on Dask workers (points.run_points),
    largest N first (they take longest); each point's progress goes to its own search.log."""
    say = say or Display()  # a live bar on a terminal, lines elsewhere
    spec.validate()
    check_jobs(jobs)
    open_sim_sweep(out, spec)

    def search(n: int, seed: int, d: Path) -> None:
        with open_new(d / "search.log") as log:
            run_sim_search(spec.config(n, seed), spec.options(n), d, say=lambda s: print(s, file=log, flush=True),
                           start_buffer=spec.start_buffer)  # fmt: skip

    say(f"twin sweep, {jobs} at a time; each point's progress is in its search.log")
    points = sorted(spec.points(), key=lambda p: (-p[0], p[1]))
    return run_points(Sweep(out, points, spec.seeds, run_name="seed"), search, say, jobs)
