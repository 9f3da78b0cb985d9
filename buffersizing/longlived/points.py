"""A sweep's points, run on either link: each point a task that fills its own directory.

    SWEEP/n0010-run1/result.json  a finished point (written atomically, last)
    SWEEP/n0010-run1/error.json   a point that failed; running the sweep again tries it again

The emulated and the twin's sweeps hand their points to `run_points`, which skips the finished
ones, runs the rest, writes error.json for a point that failed before saying why itself, reports
progress with an estimate of what is left, and ends with the count. An emulated point runs in this
process, one at a time: it needs the whole machine, and its log is the sweep's. A twin point needs
one core and no root, so several run at once as tasks on a Dask cluster (scaffold/cluster.py: this
machine's workers or Slurm jobs), each logging to its own directory. `bufsize remote` hands its
emulated points to Dask workers on other machines, one a machine, through an engine of its own
(remote/run.py): each point comes back as an archive and is merged here.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bufsize.scaffold.cluster import Where, place
from bufsize.scaffold.display import Display
from bufsize.scaffold.resultdir import read_finished, write_json_atomic
from bufsize.topologies.safefiles import make_dirs

Task = Callable[[int, int, Path], None]  # (N, run, the point's directory): result.json there, or raise


def point_dir(out: Path, flows: int, run: int) -> Path:
    return out / f"n{flows:04d}-run{run}"


def clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def finished(out: Path, flows: int, run: int) -> bool:
    """A point is finished when its result.json parses and is the search it should be (not a truncated file)."""
    r = read_finished(point_dir(out, flows, run) / "result.json")
    return r is not None and r.get("flows") == flows and "buffer_packets" in r


@dataclass
class Sweep:
    """What `run_points` needs of a sweep: its directory, its points in order, how long each N is
    expected to take (None: no model, no ETA) and what the run of a point is called (run, seed)."""

    out: Path
    points: list[tuple[int, int]]
    runs: int
    estimate: Callable[[int], float] | None = None
    run_name: str = "run"


class Progress:
    """The progress of a sweep: a bar, the point, elapsed time and an ETA from the model's estimate
    scaled by how this machine has done so far in this sweep. Given a live Display (a terminal), the
    bar is drawn in place with the current probe beneath it; otherwise each point is a line."""

    def __init__(self, sweep: Sweep, todo: list[tuple[int, int]], say: Callable[[str], None]) -> None:
        self.sweep, self.todo, self.say = sweep, todo, say
        self.t0 = time.monotonic()
        self.spent = self.estimated = 0.0
        self.display = say if isinstance(say, Display) else None
        if self.display is not None:
            self.display.start(len(sweep.points), len(sweep.points) - len(todo))

    def done(self) -> int:
        return sum(finished(self.sweep.out, *p) for p in self.sweep.points)

    def bar(self, done: int) -> str:
        return f"[{'#' * round(20 * done / max(1, len(self.sweep.points))):<20}]"

    def starting(self, i: int, n: int, r: int) -> None:
        est = self.sweep.estimate
        eta = ""
        if est is not None:
            remaining = sum(est(m) for m, _ in self.todo[i:])
            eta = f" | ETA {clock(remaining * (self.spent / self.estimated if self.estimated else 1.0))}"
        done = len(self.sweep.points) - len(self.todo) + i
        what = f"point {done + 1}/{len(self.sweep.points)}: N={n} {self.sweep.run_name} {r}/{self.sweep.runs}"
        times = f"elapsed {clock(time.monotonic() - self.t0)}{eta}"
        if self.display is not None and self.display.showing():
            self.display.step(done, what, times)
        else:
            self.say(f"{self.bar(done)} {what} | {times}")

    def ended(self, n: int, r: int, seconds: float, why: str | None) -> None:
        if self.sweep.estimate is not None:
            self.spent += seconds
            self.estimated += self.sweep.estimate(n)
        point = f"N={n} {self.sweep.run_name} {r}"
        if why is not None:
            self.say(f"  point {point} failed: {why}")
            return
        res = read_finished(point_dir(self.sweep.out, n, r) / "result.json") or {}
        flagged = "" if res.get("valid", True) else " (flagged)"
        self.say(f"  point {point}: {res.get('buffer_packets')} packets{flagged} in {clock(seconds)}")

    def closing(self) -> int:
        if self.display is not None:
            self.display.close()
        done = self.done()
        self.say(f"[{'#' * 20}] {done}/{len(self.sweep.points)} points finished in "
                 f"{clock(time.monotonic() - self.t0)}; results in {self.sweep.out}/")  # fmt: skip
        return done


def error_of(d: Path) -> str | None:
    """What a point's error.json says, if it says it."""
    e = read_finished(d / "error.json")
    return f"{e['type']}: {e['error']}" if e is not None and "type" in e and "error" in e else None


def record_error(d: Path, n: int, r: int, e: BaseException) -> None:
    """error.json for a point that failed before its experiment wrote one (a search writes its own)."""
    if not (d / "error.json").exists():
        write_json_atomic(d / "error.json", {"flows": n, "run": r, "error": str(e), "type": type(e).__name__})


@dataclass
class Engine:
    """A sweep's points as tasks on an open Dask client. `submit` sends point (N, run), whose
    directory here is given, and returns its future; `collect` looks at a future that ended and
    brings its point here, answering None or why the point failed; `alive` says whether any worker
    is left (when none is, the running points are cancelled and the rest reported unfinished)."""

    client: Any
    slots: int  # points handed out at once: one a worker
    describe: str
    submit: Callable[[int, int, Path], Any]
    collect: Callable[[Any, int, int, Path], str | None]
    alive: Callable[[], bool] = lambda: True


EngineFactory = Callable[[int], AbstractContextManager[Engine]]  # given the number of points to run


def run_points(
    sweep: Sweep, task: Task | None, say: Callable[[str], None], where: Where | EngineFactory | None = None
) -> dict:
    """Every point of `sweep` not finished yet, in its order: in this process when `where` is None,
    on the Dask workers a `Where` names (each writing into the sweep's directory), or on an engine
    of the caller's, which brings its own task (`task` None). A point's failure is said and
    recorded, and the sweep goes on."""
    todo = [p for p in sweep.points if not finished(sweep.out, *p)]
    if len(todo) < len(sweep.points):
        say(f"resuming {sweep.out}: {len(sweep.points) - len(todo)} of {len(sweep.points)} points already "
            "finished, skipped")  # fmt: skip
    progress = Progress(sweep, todo, say)
    if not callable(where) and task is None:
        raise ValueError("a sweep run here or on a Where's workers needs its task")
    if where is None:
        failed = in_process(sweep, todo, task, progress)
    elif todo:
        factory = where if callable(where) else in_place(sweep, task, where)
        with factory(len(todo)) as engine:
            failed = on_cluster(sweep, todo, progress, engine)
    else:
        failed = []
    return {"points": len(sweep.points), "finished": progress.closing(), "failed": failed}


def in_process(sweep: Sweep, todo: list[tuple[int, int]], task: Task, progress: Progress) -> list[str]:
    failed: list[str] = []
    for i, (n, r) in enumerate(todo):
        progress.starting(i, n, r)
        d = point_dir(sweep.out, n, r)
        make_dirs(d)
        t = time.monotonic()
        why = None
        try:
            task(n, r, d)
        except Exception as e:  # one point's failure (the search saved its data and error.json): go on
            why = f"{type(e).__name__}: {e}"
            record_error(d, n, r, e)
            failed.append(f"N={n} {sweep.run_name} {r}: {e}")
        progress.ended(n, r, time.monotonic() - t, why)
    return failed


def point_task(task: Task, n: int, r: int, d: Path) -> None:
    """One point on a worker; its outcome is its files (result.json or error.json). A failure is
    recorded, then raised for the engine to report (a dead worker's point the engine runs again)."""
    if not d.is_dir():  # made by the sweep before the task was sent: this worker does not see it
        raise RuntimeError(f"{d} is not there on {place()}: a sweep on a cluster needs its directory on "
                           "storage every node shares")  # fmt: skip
    (d / "error.json").unlink(missing_ok=True)  # last try's; this one writes its own
    try:
        task(n, r, d)
    except BaseException as e:
        record_error(d, n, r, e)
        raise


def in_place(sweep: Sweep, task: Task, where: Where) -> EngineFactory:
    """The cluster `where` names, its workers writing each point into the sweep's own directory."""

    @contextlib.contextmanager
    def engine(points: int) -> Iterator[Engine]:
        from bufsize.scaffold.cluster import open_cluster

        def submit(n: int, r: int, d: Path) -> Any:
            return client.submit(point_task, task, n, r, d, key=f"n{n:04d}-{sweep.run_name}{r}", pure=False)

        def collect(f: Any, n: int, r: int, d: Path) -> str | None:
            if f.status == "finished" and finished(sweep.out, n, r):
                return None
            return error_of(d) or f"{f.status}: {f.exception() if f.status == 'error' else 'no result.json'}"

        with open_cluster(where, sweep.out, points) as client:
            yield Engine(client, where.workers, where.describe(), submit, collect)

    return engine


def on_cluster(sweep: Sweep, todo: list[tuple[int, int]], progress: Progress, engine: Engine) -> list[str]:
    """The points as tasks on `engine`, at most one a worker handed out at a time so each is
    announced as it starts and the order of `todo` is kept. A stopped sweep closes the cluster,
    which ends its workers; a simulator whose worker went reads the end of its input and quits."""
    from distributed import as_completed

    from bufsize.scaffold.cluster import dashboard

    failed: list[str] = []
    queue = list(enumerate(todo))
    progress.say(f"{engine.describe}; live page: {dashboard(engine.client)}")
    running: dict[Any, tuple[int, int, float]] = {}
    done = as_completed()

    def hand_out() -> None:
        i, (n, r) = queue.pop(0)
        d = point_dir(sweep.out, n, r)
        make_dirs(d)
        progress.starting(i, n, r)
        f = engine.submit(n, r, d)
        running[f] = (n, r, time.monotonic())
        done.add(f)

    while queue and len(running) < engine.slots:
        hand_out()
    while running:
        if not done.has_ready():
            if not engine.alive():  # no worker left to run them: end the wait
                engine.client.cancel(list(running))
            time.sleep(0.2)
            continue
        f = next(done)
        n, r, t = running.pop(f)
        d = point_dir(sweep.out, n, r)
        why = engine.collect(f, n, r, d)
        if why is not None:
            record_error(d, n, r, RuntimeError(why))
            failed.append(f"N={n} {sweep.run_name} {r}: {why}")
            why += f" (see {d}/)"
        progress.ended(n, r, time.monotonic() - t, why)
        if queue and engine.alive():
            hand_out()
    for _, (n, r) in queue:
        failed.append(f"N={n} {sweep.run_name} {r}: not run, no worker was left")
    return failed
