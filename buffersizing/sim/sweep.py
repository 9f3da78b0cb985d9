"""A sweep on the simulator twin: the sweep of longlived/sweep.py, its points twin searches, one per
(N, seed), several at a time as tasks on Dask workers (one each: a simulation is single-threaded and
needs no other resource, and no root).

The layout is the emulated sweep's (SWEEP/manifest.json, SWEEP/n0010-run1/result.json), so `bufsize
plot` draws it and `bufsize plot EMULATED --with-sim SWEEP` overlays it; run r is seed r. Each point
starts from its congestion control's rule, never from the sweep's other answers as the emulated
sweep does: points run concurrently, and a point's answer must depend on (N, seed) alone, not on
which other points happened to finish first.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar

from bufsize.longlived.search import SearchOptions, check_search, run_search
from bufsize.longlived.sweep import PointRunner
from bufsize.scaffold.cluster import Where, place
from bufsize.scaffold.runs import Simulated
from bufsize.scaffold.twin import simulator_manifest
from bufsize.topologies.config import parse_rtts
from bufsize.topologies.errors import UsageError
from bufsize.topologies.nssim import MAX_SIM_HOSTS, SimConfig
from bufsize.topologies.safefiles import open_new


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
    delayed_ack: bool = True
    start_buffer: str = "calibration"
    sender_pacing: bool = False
    start_spread_s: float = 1.0
    attributes: list[str] = field(default_factory=list)  # ns-3 attribute defaults, NAME=VALUE
    runs_key: ClassVar[str] = "seeds"
    run_name: ClassVar[str] = "seed"

    @property
    def runs(self) -> int:
        return self.seeds

    def config(self, flows: int, seed: int) -> SimConfig:
        hosts = min(flows, self.max_hosts)
        rtts = parse_rtts(self.rtt_ms, hosts)
        return SimConfig(hosts, self.rate_mbps, rtts, self.cc, self.access_mbps, seed, delayed_ack=self.delayed_ack,
                         sender_pacing=self.sender_pacing, start_spread_s=self.start_spread_s,
                         attributes=tuple(self.attributes))  # fmt: skip

    def options(self, flows: int) -> SearchOptions:
        return SearchOptions(flows=flows, **self.search)

    def points(self) -> list[tuple[int, int]]:
        return [(n, s) for s in range(1, self.seeds + 1) for n in self.flows]

    def validate(self) -> None:
        if not self.flows or len(set(self.flows)) != len(self.flows):
            raise UsageError("--flows: give each number of flows once")
        if not 1 <= self.seeds <= 100:
            raise UsageError(f"--seeds {self.seeds}: must be from 1 to 100")
        if not 1 <= self.max_hosts <= MAX_SIM_HOSTS:
            raise UsageError(f"--hosts {self.max_hosts}: must be from 1 to {MAX_SIM_HOSTS}")
        for n in self.flows:
            check_search(self.config(n, 1), Simulated(start_buffer=self.start_buffer), self.options(n))

    def to_dict(self) -> dict:
        return asdict(self)

    def made_before(self, old: dict, machine: dict) -> dict:
        """A manifest's spec with what it ran where it predates an option: the defaults of then."""
        then = {"delayed_ack": True, "start_buffer": "calibration", "sender_pacing": False, "start_spread_s": 1.0,
                "attributes": []}  # fmt: skip
        return then | old


def check_jobs(jobs: int) -> None:
    if not 1 <= jobs <= 64:
        raise UsageError(f"--workers (--jobs) {jobs}: must be from 1 to 64")


SLURM_JOBS = 8  # a modest share of a cluster; --workers asks for more


def default_jobs(cluster: str = "local") -> int:
    return SLURM_JOBS if cluster == "slurm" else max(1, len(os.sched_getaffinity(0)))


def twin_runner(spec: SimSweepSpec, where: Where) -> PointRunner:
    """A twin sweep's points on the Dask workers `where` names, each point's progress in its own
    search.log, which begins with where it ran (the sweep's display says which are running and how
    each ended)."""
    check_jobs(where.workers)

    def search(n: int, seed: int, d: Path) -> None:
        with open_new(d / "search.log") as log:
            print(f"point N={n} seed {seed} on {place()}", file=log, flush=True)
            say = lambda s: print(s, file=log, flush=True)  # noqa: E731
            run_search(spec.config(n, seed), Simulated(d, say, spec.start_buffer), spec.options(n))

    return PointRunner(
        search,
        lambda: simulator_manifest(spec.config(spec.flows[0], 1)),
        f"twin sweep on {where.describe()}; each point's progress is in its search.log",
        where=where,
    )
