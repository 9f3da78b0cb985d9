"""`bufsize remote`: one sweep's emulated points on Dask workers on other machines, reached by SSH,
merged into one sweep directory here.

For each machine, in parallel, Fabric prepares it: log in (key only, pinned host key: ssh.py), ship
the commit as `git archive` output into REMOTE_DIR/src/COMMIT (once per commit), run ./setup.sh
there, and check it with `bufsize doctor --json`. A machine that fails any step is named in one line
and gets no points.

Then the engine takes over. A Dask scheduler runs here on loopback and each ready machine runs one
worker, started over its SSH connection and joined to the scheduler through SSH forwards
(workers.py). Each point is a task (pointtask.py): `bufsize sweep --points N:RUN` on whichever
machine is free, into REMOTE_DIR/sweeps/ID (ID: a hash of the settings and the commit), its
directory sent back as an archive, checked member by member and by commit, and moved into --out in
one rename. A worker that dies (its machine lost, its process killed) has its point run again on
another machine by the engine. --out is a sweep directory like a local one: the same manifest.json
(plus a `remote` section saying which machine ran which point), the same nNNNN-runK/ directories,
then the figure and table.

Re-running the same command resumes: points merged here are skipped; a point finished on a machine
but never merged is sent back without being run again, when that machine gets it.

Remote layout (REMOTE_DIR, per machine; `{machine}` in --remote-dir is replaced by its label):
    src/COMMIT/          the shipped tree, its .venv and .bufsize-commit
    sweeps/ID/           the machine's sweep directory (only the points it ran)
    runs/ID/             worker.log, one log a point, the worker's scratch (dask/)
    logs/setup-COMMIT.log
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import posixpath
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bufsize.longlived.points import Engine, Sweep
from bufsize.longlived.sweep import SweepSpec, clock, existing_manifest, finished, run_points, spec_from_args
from bufsize.remote.plan import (
    DEFAULT_REMOTE_DIR,
    MAX_POINT_ARCHIVE_BYTES,
    BadPoint,
    Machine,
    Point,
    assign,
    check_point,
    merge_point,
    merged_manifest,
    parse_machines,
    point_name,
    printable,
    sha256_of,
    sweep_argv,
    sweep_id,
    unpack_point,
    write_manifest,
)
from bufsize.remote.pointtask import run_point
from bufsize.remote.ssh import SSH_ERRORS, MachineCannotRun, MachineUnreachable, connect, explain, q, sh
from bufsize.remote.workers import RESOURCE, MachineWorker
from bufsize.scaffold.cluster import local_cluster, sweep_security
from bufsize.scaffold.resultdir import check_out_dir, table_rows
from bufsize.topologies.errors import RunError, UsageError

REPO = Path(__file__).resolve().parents[2]
SETUP_TIMEOUT_S = 3600  # a fresh VM installs packages and builds the venv: minutes, not an hour
_SAFE_DIR = re.compile(r"/[A-Za-z0-9._/{}-]*")


# ---------------------------------------------------------------------------------------------
# This side: the commit to ship, the arguments


def resolve_commit(given: str | None, repo: Path = REPO) -> str:
    """The full hash to ship. HEAD by default, and then only from a clean tree: the results must name
    the commit that made them, and uncommitted edits would silently not run."""

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)

    rev = given if given is not None else "HEAD"
    if rev.startswith("-"):
        raise UsageError(f"--commit {rev}: not a commit")
    res = git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if res.returncode != 0:
        raise UsageError(f"--commit {rev}: not a commit of {repo} (bufsize remote ships a git checkout)")
    if given is None and git("status", "--porcelain", "--untracked-files=no").stdout.strip():
        raise UsageError(
            "the checkout has uncommitted changes, which would not be shipped: commit them, "
            "or give --commit HEAD to ship the last commit as it is"
        )
    return res.stdout.strip()


def archive(commit: str, dest: Path, repo: Path = REPO) -> Path:
    path = dest / f"bufsize-{commit[:12]}.tar.gz"
    with path.open("wb") as f:
        res = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar.gz", commit], stdout=f,
                             stderr=subprocess.PIPE, text=False)  # fmt: skip
    if res.returncode != 0:
        raise RunError(f"git archive {commit} failed: {res.stderr.decode(errors='replace').strip()}")
    return path


def readable_file(name: str, given: str) -> Path:
    path = Path(given).expanduser()
    if not path.is_file():
        raise UsageError(f"{name} {given}: no such file")
    try:
        path.open("rb").close()
    except OSError as e:
        raise UsageError(f"{name} {given}: cannot read it ({e.strerror})") from e
    return path


def check_remote_dir(template: str) -> str:
    # normpath keeps a leading '//' (POSIX leaves its meaning to the system): as '/' here, so that
    # '//proc/x' is checked as the /proc it is.
    norm = posixpath.normpath(template)
    norm = "/" + norm.lstrip("/") if norm.startswith("//") else norm
    if not _SAFE_DIR.fullmatch(norm) or norm in ("/", "/{machine}") or norm.split("/")[1] in ("proc", "sys", "dev"):
        raise UsageError(
            f"--remote-dir {template}: give an absolute directory of its own, like {DEFAULT_REMOTE_DIR} "
            "(letters, digits, . _ - / and {machine} only)"
        )
    return norm


@contextlib.contextmanager
def locked(out: Path) -> Iterator[None]:
    """One bufsize remote per merged directory at a time (a lock on the directory itself, no file)."""
    fd = os.open(out, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            raise UsageError(f"--out {out}: another bufsize remote is merging into it") from e
        yield
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# One machine


@dataclass
class Paths:
    """Where things are on one machine."""

    root: str
    commit: str
    sid: str

    @property
    def src(self) -> str:
        return f"{self.root}/src/{self.commit}"

    @property
    def sweep(self) -> str:
        return f"{self.root}/sweeps/{self.sid}"

    @property
    def runs(self) -> str:
        return f"{self.root}/runs/{self.sid}"

    @property
    def setup_log(self) -> str:
        return f"{self.root}/logs/setup-{self.commit}.log"


@dataclass
class Job:
    """What one invocation asks of every machine."""

    spec: SweepSpec
    commit: str
    tarball: Path
    identity: Path | None
    known_hosts: Path
    remote_dir: str
    out: Path
    say: Callable[[str], None]
    json: bool = False  # the outcome as JSON on stdout (progress stays on stderr)


class Remote:
    """One machine: prepare it (the tree, setup, doctor), then run its Dask worker."""

    def __init__(self, machine: Machine, job: Job) -> None:
        self.m = machine
        self.job = job
        root = job.remote_dir.replace("{machine}", machine.path_label)
        self.paths = Paths(root, job.commit, sweep_id(job.spec, job.commit))
        self.conn = None
        self.sudo = False
        self.error: str | None = None  # why it cannot run
        self.caps: dict = {}
        self.worker: MachineWorker | None = None

    def say(self, text: str) -> None:
        self.job.say(f"[{self.m.label}] {text}")

    # -- SSH, with every failure turned into one line

    def new_connection(self) -> None:
        """A Connection object (nothing is sent yet; drive() makes them in the machines' order)."""
        self.conn = connect(self.m, self.job.identity, self.job.known_hosts)

    def open(self) -> None:
        if self.conn is None:
            self.new_connection()
        if self.conn.is_connected:
            return
        try:
            self.conn.open()
        except SSH_ERRORS as e:
            self.close()
            raise MachineUnreachable(explain(e, self.m, self.job.known_hosts)) from e

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
        self.conn = None

    def sh(self, script: str, timeout: float | None = 120, root: bool = True):  # noqa: ANN201
        self.open()
        try:
            return sh(self.conn, script, sudo=self.sudo and root, timeout=timeout)
        except SSH_ERRORS as e:
            self.close()
            raise MachineUnreachable(explain(e, self.m, self.job.known_hosts)) from e

    # -- preparing: root, the shipped tree, setup, doctor

    def prepare(self) -> bool:
        """True when the machine can run; else self.error says why in one line."""
        try:
            self._prepare()
            return True
        except (MachineUnreachable, MachineCannotRun) as e:
            self.error = str(e)
            self.close()
            return False

    def _prepare(self) -> None:
        res = self.sh("id -u; uname -s", root=False)
        uid, _, system = res.stdout.strip().partition("\n")
        if system.strip() != "Linux":
            raise MachineCannotRun(f"{self.m.label}: not Linux ({system.strip() or 'unknown system'})")
        if uid.strip() != "0":
            if self.sh("sudo -n true", root=False).exited != 0:
                raise MachineCannotRun(
                    f"{self.m.label}: logged in as {self.m.user}, who is not root and has no password-less sudo "
                    "(namespaces and qdiscs need root)"
                )
            self.sudo = True
        self.ship()
        self.say("running ./setup.sh (installs what is missing; minutes on a fresh machine)")
        script = (
            f"mkdir -p {q(posixpath.dirname(self.paths.setup_log))} && cd {q(self.paths.src)} && "
            f"./setup.sh > {q(self.paths.setup_log)} 2>&1 || {{ tail -n 3 {q(self.paths.setup_log)}; exit 1; }}"
        )
        res = self.sh(script, timeout=SETUP_TIMEOUT_S)
        if res.exited != 0:
            last = " | ".join(line.strip() for line in res.stdout.strip().splitlines()[-3:])
            raise MachineCannotRun(f"{self.m.label}: ./setup.sh failed ({last}; see {self.paths.setup_log} there)")
        self.check_doctor()

    def ship(self) -> None:
        """The commit's tree into src/COMMIT, once: a copy whose .bufsize-commit names the commit is kept."""
        src = self.paths.src
        if self.sh(f"cat {q(src)}/.bufsize-commit 2>/dev/null || true").stdout.strip() == self.job.commit:
            self.say(f"commit {self.job.commit[:12]} already there")
            return
        size = self.job.tarball.stat().st_size / 1e6
        self.say(f"shipping commit {self.job.commit[:12]} ({size:.1f} MB)")
        with self.upload(self.job.tarball) as tmp:
            part = f"{src}.part"
            # What arrived is what was shipped (checked there before anything of it is unpacked).
            want = f"{sha256_of(self.job.tarball)}  {tmp}"
            script = (
                f"set -e; echo {q(want)} | sha256sum -c --status; "
                f"rm -rf {q(part)}; mkdir -p {q(part)}; tar -xzf {q(tmp)} -C {q(part)}; "
                f"printf '%s\\n' {q(self.job.commit)} > {q(part)}/.bufsize-commit; "
                f"rm -rf {q(src)}; mv {q(part)} {q(src)}"
            )
            res = self.sh(script, timeout=600)
            if res.exited != 0:
                raise MachineCannotRun(f"{self.m.label}: unpacking the tree failed: {res.stderr.strip()[-200:]}")

    @contextlib.contextmanager
    def upload(self, local: Path) -> Iterator[str]:
        """`local` copied to a file of the login user's own there (mktemp: mode 0600, and no name
        another user could have planted), removed on the way out."""
        tmp = self.sh("mktemp /tmp/bufsize-upload.XXXXXX", root=False).stdout.strip()
        if not tmp.startswith("/tmp/bufsize-upload."):
            raise MachineCannotRun(f"{self.m.label}: mktemp in /tmp failed")
        try:
            try:
                with local.open("rb") as f:
                    self.conn.put(f, remote=tmp)
            except SSH_ERRORS as e:
                self.close()
                raise MachineUnreachable(explain(e, self.m, self.job.known_hosts)) from e
            yield tmp
        finally:
            with contextlib.suppress(MachineUnreachable):
                self.sh(f"rm -f {q(tmp)}", root=False)

    def install_tls(self, cert: Path, key: Path) -> tuple[str, str]:
        """The sweep's certificate and key into runs/ID/tls/, readable by root alone."""
        there = f"{self.paths.runs}/tls"
        for local in (cert, key):
            with self.upload(local) as tmp:
                script = f"set -e; umask 077; mkdir -p {q(there)}; install -m 600 {q(tmp)} {q(there)}/{q(local.name)}"
                if self.sh(script).exited != 0:
                    raise MachineCannotRun(f"{self.m.label}: could not install the sweep's TLS certificate")
        return f"{there}/{cert.name}", f"{there}/{key.name}"

    def check_doctor(self) -> None:
        res = self.sh(f"{q(self.paths.src)}/.venv/bin/bufsize doctor --json", timeout=300)
        try:
            caps = json.loads(res.stdout)
        except (ValueError, RecursionError):
            why = (res.stderr.strip().splitlines() or ["no output"])[-1]
            raise MachineCannotRun(f"{self.m.label}: bufsize doctor failed: {why}") from None
        shape = {"problems": list, "congestion_controls": list, "qdiscs": dict}
        if not isinstance(caps, dict) or any(
            caps.get(k) is not None and not isinstance(caps[k], t) for k, t in shape.items()
        ):
            raise MachineCannotRun(f"{self.m.label}: bufsize doctor answered JSON that is not a doctor report")
        problems = [str(p) for p in caps.get("problems") or []]
        spec = self.job.spec
        ccs = [str(c) for c in caps.get("congestion_controls") or []]
        if spec.cc not in ccs and f"{spec.cc} (module)" not in ccs:
            problems.append(f"no {spec.cc} congestion control (it has {', '.join(ccs) or 'none'})")
        if spec.delay_backend == "netem" and not (caps.get("qdiscs") or {}).get("netem"):
            problems.append("no sch_netem, which --delay-backend netem asks for")
        if problems:
            raise MachineCannotRun(f"{self.m.label}: cannot run: {'; '.join(problems)}")
        self.caps = caps
        self.say(f"ready: kernel {caps.get('kernel')}, delay backend {caps.get('delay_backend')}")


def update_manifest(job: Job, by_machine: dict[str, dict]) -> None:
    old = None
    with contextlib.suppress(OSError, ValueError):
        old = json.loads((job.out / "manifest.json").read_text())
    write_manifest(job.out, merged_manifest(old, job.spec, job.commit, by_machine))


# ---------------------------------------------------------------------------------------------
# The engine: the machines' workers, a point sent to one and merged here


def deliver(job: Job, f: Any, point: Point) -> str | None:
    """A point's task ended: its archive checked and merged here, or why not."""
    if f.status != "finished":
        e = f.exception() if f.status == "error" else None
        return (
            f"{type(e).__name__}: {printable(str(e))}" if e is not None else f"{f.status}: no worker was left to run it"
        )
    got = f.result()
    f.release()
    label, blob = printable(str(got.get("worker"))), got.get("archive") or b""
    if len(blob) > MAX_POINT_ARCHIVE_BYTES:
        return f"not merged: its archive from {label} is over {MAX_POINT_ARCHIVE_BYTES >> 20} MB"
    with tempfile.TemporaryDirectory(prefix=".incoming-", dir=job.out) as tmp:
        archive = Path(tmp) / "point.tar.gz"
        archive.write_bytes(blob)
        try:
            unpacked = unpack_point(archive, point, Path(tmp))
            check_point(unpacked, point, job.commit)
        except BadPoint as e:
            return f"not merged: from {label}: {e}"
        if merge_point(job.out, unpacked, point):
            update_manifest(job, {label: {"machine": got.get("machine"), "points": [point_name(point)]}})
    return None


@contextlib.contextmanager
def ssh_engine(job: Job, remotes: list[Remote], ready: list[Remote], runs_per_machine: int | None) -> Iterator[Engine]:
    """A scheduler here and a worker on each ready machine; a machine whose worker does not come up
    is named and left out. On the way out the workers end with their SSH sessions."""
    spec = job.spec
    argv = sweep_argv(spec)
    sid = sweep_id(spec, job.commit)
    # Mode 0700, inside this run's transit directory, which a later run removes if this one is killed.
    scratch = tempfile.TemporaryDirectory(prefix="tls-", dir=job.tarball.parent)
    security = sweep_security(Path(scratch.name))
    cert, key = Path(security.tls_worker_cert), Path(security.tls_worker_key)
    with scratch, local_cluster(0, security) as client:
        port = int(client.scheduler.address.rsplit(":", 1)[1])
        started = []
        try:
            for r in ready:
                try:
                    r.open()
                    tls = r.install_tls(cert, key)
                    r.worker = MachineWorker(r.conn, r.m.label, r.paths.src, r.paths.runs, r.sudo, port, tls)
                    started.append(r)
                    r.worker.start()
                except (MachineUnreachable, MachineCannotRun, *SSH_ERRORS) as e:
                    r.error = str(e)
                    job.say(f"[{r.m.label}] cannot be used: {r.error}")
            live = []
            for r in started:
                if r.error is not None:
                    continue
                try:
                    r.worker.wait_registered(client)
                    live.append(r)
                    r.say("its Dask worker is up")
                except (MachineCannotRun, *SSH_ERRORS) as e:
                    r.error = str(e)
                    job.say(f"[{r.m.label}] cannot be used: {r.error}")
            if not live:
                raise RunError("no machine's worker came up (see the lines above); nothing was run")
            labels = [r.m.label for r in remotes]  # --replicate: run r's machine, as given

            def submit(n: int, run: int, d: Path) -> Any:
                where = {}
                if runs_per_machine is not None and (run - 1) // runs_per_machine < len(labels):
                    where = {"workers": [labels[(run - 1) // runs_per_machine]], "allow_other_workers": True}
                return client.submit(run_point, argv, sid, n, run, key=point_name((n, run)), pure=False,
                                     resources={RESOURCE: 1}, **where)  # fmt: skip

            yield Engine(
                client,
                len(live),
                f"{len(live)} machines, one Dask worker each, through SSH",
                submit,
                lambda f, n, run, d: deliver(job, f, (n, run)),
                alive=lambda: any(not r.worker.ended() for r in live),
            )
            for r in live:
                if r.worker.ended():
                    r.error = f"its worker ended part-way (see {r.worker.log} there)"
        finally:
            for r in started:
                r.worker.stop()
                with contextlib.suppress(MachineUnreachable, *SSH_ERRORS):
                    r.sh(f"rm -rf {q(r.paths.runs)}/tls")


def run_remote(a: argparse.Namespace) -> int:
    t0 = time.monotonic()
    spec = spec_from_args(a)
    machines = parse_machines(a.machine)
    runs_per_machine = None
    if a.replicate:
        runs_per_machine = spec.runs
        spec = replace(spec, runs=spec.runs * len(machines))
        spec.validate()
    identity = readable_file("--identity", a.identity) if a.identity is not None else None
    known_hosts = readable_file("--known-hosts", a.known_hosts)
    remote_dir = check_remote_dir(a.remote_dir)
    if len(machines) > 1 and "{machine}" not in remote_dir and len({m.address for m in machines}) < len(machines):
        raise UsageError("--remote-dir: machines on one address share a filesystem: put {machine} in it")
    commit = resolve_commit(a.commit)
    out = check_out_dir(a.out, create=not a.dry_run)
    if out.exists():
        existing_manifest(out, spec)  # refuses a sweep of other settings
    if a.dry_run:
        p = remote_plan(out, spec, machines, commit, runs_per_machine)
        print(json.dumps(p, indent=1) if a.json else format_remote_plan(p))
        return 0
    lock = threading.Lock()

    def say(text: str) -> None:
        with lock:  # remote machines' words pass through here: escaped
            print(printable(text), file=sys.stderr, flush=True)

    with locked(out):
        for stale in out.glob(".incoming-*"):  # a killed earlier run's transit files (we hold the lock)
            shutil.rmtree(stale, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix=".incoming-", dir=out) as tmp:
            tarball = archive(commit, Path(tmp))
            job = Job(spec, commit, tarball, identity, known_hosts, remote_dir, out, say, json=a.json)
            remotes = [Remote(m, job) for m in machines]
            try:
                return drive(job, remotes, runs_per_machine, t0)
            except KeyboardInterrupt:
                say("bufsize remote: interrupted; the points running were stopped with their workers: "
                    "re-run the same command to run them and the rest")  # fmt: skip
                return 130
            finally:
                for r in remotes:
                    r.close()


def in_threads(items: list[Remote], fn: Callable[[Remote], object]) -> None:
    threads = [threading.Thread(target=fn, args=(r,), daemon=True, name=r.m.label) for r in items]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.5)  # short joins: Ctrl-C reaches this thread


def drive(job: Job, remotes: list[Remote], runs_per_machine: int | None, t0: float) -> int:
    spec = job.spec
    total = len(spec.points())
    todo = [p for p in spec.points() if not finished(job.out, *p)]
    job.say(
        f"bufsize remote: {total} points ({len(spec.flows)} N x {spec.runs} runs) on {len(remotes)} machines, "
        f"commit {job.commit[:12]}; {total - len(todo)} already merged in {job.out}"
    )
    failed: list[str] = []
    if todo:
        for r in remotes:
            r.new_connection()
        in_threads(remotes, Remote.prepare)
        for r in remotes:
            if r.error is not None:
                job.say(f"[{r.m.label}] cannot be used: {r.error}")
        ready = [r for r in remotes if r.error is None]
        if not ready:
            raise RunError("no machine could be used (see the lines above); nothing was started")
        points = sorted(todo, key=lambda p: (-p[0], p[1]))  # the longest searches first
        sweep = Sweep(job.out, points, spec.runs, spec.estimate)
        failed = run_points(sweep, None, job.say, lambda _: ssh_engine(job, remotes, ready, runs_per_machine))["failed"]
        for r in ready:
            if r.error is not None:
                job.say(f"[{r.m.label}] {r.error}")
    merged = [p for p in spec.points() if finished(job.out, *p)]
    missing = [p for p in spec.points() if p not in merged]
    job.say(f"bufsize remote: {len(merged)}/{total} points merged in {clock(time.monotonic() - t0)}")
    paths = []
    if merged:
        from bufsize.longlived.report import make_report

        paths = make_report(job.out)
    if job.json:
        print(json.dumps({"out": str(job.out), "points": total, "finished": len(merged), "missing": names(missing),
                          "failed": failed, "wrote": [str(p) for p in paths],
                          "table": table_rows(job.out) if paths else []}, indent=1))  # fmt: skip
    for path in [] if job.json else paths:
        print(f"wrote {path}")
    if missing:
        job.say(f"bufsize remote: {len(missing)} point(s) not merged ({names(missing)}); re-run the same command")
        return 1
    return 0


def remote_plan(out: Path, spec: SweepSpec, machines: list, commit: str, runs_per_machine: int | None) -> dict:
    """Who would run which point, and for about how long, if every machine were ready and the points
    went longest first to the least loaded (nothing is contacted: in the real run each point goes to
    the first machine free, so the split is an estimate)."""
    labels = [m.label for m in machines]
    todo = [p for p in spec.points() if not (out.exists() and finished(out, *p))]
    shares = assign(todo, labels, spec.estimate, runs_per_machine, labels)
    load = {m: round(sum(spec.estimate(n) for n, _ in ps)) for m, ps in shares.items()}
    return {
        "out": str(out),
        "commit": commit,
        "spec": spec.to_dict(),
        "mode": "replicate" if runs_per_machine else "split",
        "machines": {m: {"points": names(ps), "estimate_s": load[m]} for m, ps in shares.items()},
        "pending_points": len(todo),
        "points": len(spec.points()),
        "estimate_s": max(load.values(), default=0),
        "estimate_basis": "model of dynamics.py; not counting each machine's setup (packages, venv) on first use",
    }


def format_remote_plan(p: dict) -> str:
    lines = [
        f"remote sweep into {p['out']}/ of commit {p['commit'][:12]}, {p['mode']} (nothing is contacted by --dry-run)",
        f"  {p['pending_points']} of {p['points']} points to run:",
    ]
    for m, share in p["machines"].items():
        lines.append(f"  {m}: {share['points'] or 'nothing'} (about {clock(share['estimate_s'])})")
    lines.append(f"  about {clock(p['estimate_s'])} in all ({p['estimate_basis']})")
    return "\n".join(lines)


def names(points: list[Point]) -> str:
    return ", ".join(f"N={n} run {r}" for n, r in points)
