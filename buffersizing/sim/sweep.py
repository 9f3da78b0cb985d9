"""A sweep on the simulator twin: one search per (N, seed), each in its own directory, resumable,
several at a time (one process each: a simulation is single-threaded and needs no other resource).

The layout is the emulated sweep's (SWEEP/manifest.json, SWEEP/n0010-run1/result.json), so `bufsize
plot` draws it and `bufsize plot EMULATED --with-sim SWEEP` overlays it; run r is seed r. Each point
starts from its congestion control's rule, never from the sweep's other answers as the emulated
sweep does: points run concurrently, and a point's answer must depend on (N, seed) alone, not on
which other points happened to finish first.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.process
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bufsize.longlived.search import SearchOptions
from bufsize.longlived.sweep import clock, finished, point_dir
from bufsize.scaffold.resultdir import check_out_dir, write_json_atomic
from bufsize.scaffold.schema import stamp
from bufsize.sim.search import check_start_buffer, run_sim_search, simulator_manifest, validate
from bufsize.topologies.config import parse_rtts
from bufsize.topologies.errors import UsageError
from bufsize.topologies.nssim import MAX_SIM_HOSTS, SimConfig
from bufsize.topologies.safefiles import make_dirs, open_new, read_bounded


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


def _point(cfg: SimConfig, opts: SearchOptions, d: Path, start_buffer: str) -> None:
    """One point, in its own process; its progress goes to the point's own log, its outcome to
    result.json or error.json (the sweep reads those: the files are the record, not a return value)."""
    # SIGTERM from the sweep ends the search through its `with`, which ends the simulator too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    make_dirs(d)
    with open_new(d / "search.log") as log:
        try:
            run_sim_search(cfg, opts, d, say=lambda s: print(s, file=log, flush=True), start_buffer=start_buffer)
        except BaseException as e:  # the sweep goes on; the point says why, and is tried again next time
            write_json_atomic(d / "error.json", {"flows": opts.flows, "seed": cfg.seed, "error": str(e),
                                                 "type": type(e).__name__})  # fmt: skip
            if isinstance(e, Exception):
                sys.exit(1)  # said in error.json, which the sweep reports: no traceback on its terminal
            raise
    (d / "error.json").unlink(missing_ok=True)


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
        raise UsageError(f"--jobs {jobs}: must be from 1 to 64")


def default_jobs() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def run_sim_sweep(out: Path, spec: SimSweepSpec, jobs: int, say: Callable[[str], None] | None = None) -> dict:
    """Every (N, seed) not finished yet, `jobs` at a time, largest N first (they take longest). Each
    point is a child process of this one; if the sweep stops (a signal, an error) they are ended by
    their PIDs, and each ends its simulator on the way out."""
    say = say or (lambda s: print(s, file=sys.stderr, flush=True))
    spec.validate()
    check_jobs(jobs)
    open_sim_sweep(out, spec)
    points = spec.points()
    queue = sorted((p for p in points if not finished(out, *p)), key=lambda p: (-p[0], p[1]))
    if len(queue) < len(points):
        say(f"resuming {out}: {len(points) - len(queue)} of {len(points)} points already finished, skipped")
    say(f"twin sweep: {len(queue)} points, {jobs} at a time; each point's progress is in its search.log")
    t0 = time.monotonic()
    failed: list[str] = []
    running: list[tuple[multiprocessing.process.BaseProcess, int, int]] = []
    ctx = multiprocessing.get_context("fork")
    try:
        while queue or running:
            while queue and len(running) < jobs:
                n, s = queue.pop(0)
                args = (spec.config(n, s), spec.options(n), point_dir(out, n, s), spec.start_buffer)
                p = ctx.Process(target=_point, args=args)
                p.start()
                running.append((p, n, s))
            time.sleep(0.2)
            for item in [r for r in running if r[0].exitcode is not None]:
                running.remove(item)
                p, n, s = item
                p.join()
                done = sum(finished(out, *q) for q in points)
                d = point_dir(out, n, s)
                if p.exitcode == 0 and finished(out, n, s):
                    r = json.loads((d / "result.json").read_text())
                    say(f"[{done}/{len(points)}] N={n} seed {s}: {r['buffer_packets']} packets"
                        f"{'' if r['valid'] else ' (flagged)'}, {r['simulated_seconds']:.0f} s simulated in "
                        f"{r['wall_seconds']:.0f} s | elapsed {clock(time.monotonic() - t0)}")  # fmt: skip
                else:
                    why = error_of(d) or f"exit status {p.exitcode}"
                    failed.append(f"N={n} seed {s}: {why}")
                    say(f"[{done}/{len(points)}] N={n} seed {s} failed: {why} (see {d}/search.log)")
    finally:
        for p, _, _ in running:
            p.terminate()  # our own children, by PID
        for p, _, _ in running:
            p.join(15)
    done_points = sum(finished(out, n, s) for n, s in points)
    say(f"{done_points}/{len(points)} points finished in {clock(time.monotonic() - t0)}; results in {out}/")
    return {"points": len(points), "finished": done_points, "failed": failed}


def error_of(d: Path) -> str | None:
    try:
        e = json.loads((d / "error.json").read_text())
        return f"{e['type']}: {e['error']}"
    except (OSError, ValueError, KeyError, TypeError):
        return None
