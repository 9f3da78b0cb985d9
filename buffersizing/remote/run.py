"""`bufsize remote`: one sweep over several machines by SSH (Fabric 3), merged into one sweep directory.

For each machine, in parallel: log in (key only, pinned host key: ssh.py), ship the commit as
`git archive` output into REMOTE_DIR/src/COMMIT (once per commit), run ./setup.sh there, and check
it with `bufsize doctor --json`. A machine that fails any step is named in one line and gets no
points; the others share them (the split is redistributed over the machines that are ready).

Then each ready machine runs `bufsize sweep --points ...` for its share, detached (setsid: its own
session, no controlling terminal, so a dropped SSH connection sends it nothing), into
REMOTE_DIR/sweeps/ID (ID: a hash of the settings and the commit, so the same command finds it
again). This side polls every --poll-s seconds, pulls each finished point (a tarball over SFTP,
checked member by member and by commit) and moves it into --out in one rename. --out is a sweep
directory like a local one: the same manifest.json (plus a `remote` section saying which machine ran
which point), the same nNNNN-runK/ directories, then the figure and table.

Re-running the same command resumes: points merged here are not redone; points finished on a
machine but not pulled are pulled; a worker still running is left to run; points whose worker is
gone (a rebooted machine, a killed process) are started again. A machine that stops answering is
retried until --give-up-s has passed; its points are then reported as unfinished, and the next run
gives them to whichever machines are ready.

Remote layout (REMOTE_DIR, per machine; `{machine}` in --remote-dir is replaced by its label):
    src/COMMIT/          the shipped tree, its .venv and .bufsize-commit
    sweeps/ID/           the machine's sweep directory (only its own points are run there)
    runs/ID/             worker.pid, worker.log, points, pulled tarballs while in transit
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
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from bufsize.longlived.sweep import SweepSpec, clock, existing_manifest, finished, spec_from_args
from bufsize.remote.plan import (
    DEFAULT_REMOTE_DIR,
    MAX_POINT_ARCHIVE_BYTES,
    BadPoint,
    Machine,
    Point,
    Status,
    assign,
    check_point,
    merge_point,
    merged_manifest,
    parse_machines,
    parse_status,
    point_name,
    printable,
    sha256_of,
    sweep_argv,
    sweep_id,
    unpack_point,
    write_manifest,
)
from bufsize.remote.ssh import SSH_ERRORS, MachineCannotRun, MachineUnreachable, connect, explain, q, sh
from bufsize.scaffold.resultdir import check_out_dir, table_rows
from bufsize.topologies.errors import RunError, UsageError
from bufsize.topologies.units import digits

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
    incoming: Path
    poll_s: float
    give_up_s: float
    say: Callable[[str], None]
    lock: threading.Lock = field(default_factory=threading.Lock)
    json: bool = False  # the outcome as JSON on stdout (progress stays on stderr)


class Remote:
    """One machine's part: prepare it, run and watch its worker, pull what it finishes."""

    def __init__(self, machine: Machine, job: Job) -> None:
        self.m = machine
        self.job = job
        root = job.remote_dir.replace("{machine}", machine.path_label)
        self.paths = Paths(root, job.commit, sweep_id(job.spec, job.commit))
        self.conn = None
        self.sudo = False
        self.error: str | None = None  # why it cannot run, or why it was given up
        self.caps: dict = {}
        self.status = Status()
        self.owned: list[Point] = []  # points this machine's worker is to run
        self.merged: list[Point] = []
        self.failed: dict[Point, str] = {}
        self.machine_manifest: dict | None = None
        self.started = False  # this run has looked at it once and started its part if it had to
        self.last_line = ""  # the progress line last printed

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
        # An upload file of the login user's own (mktemp: no name another user could have planted).
        tmp = self.sh("mktemp /tmp/bufsize-ship.XXXXXX", root=False).stdout.strip()
        if not tmp.startswith("/tmp/bufsize-ship."):
            raise MachineCannotRun(f"{self.m.label}: mktemp in /tmp failed")
        try:
            try:
                with self.job.tarball.open("rb") as f:
                    self.conn.put(f, remote=tmp)
            except SSH_ERRORS as e:
                self.close()
                raise MachineUnreachable(explain(e, self.m, self.job.known_hosts)) from e
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
        finally:
            with contextlib.suppress(MachineUnreachable):
                self.sh(f"rm -f {q(tmp)}", root=False)

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

    # -- the worker

    def status_script(self) -> str:
        p = self.paths
        log = f"{p.runs}/worker.log"
        return (
            f"pid=$(cat {q(p.runs)}/worker.pid 2>/dev/null || true); case $pid in ''|*[!0-9]*) pid=0;; esac; "
            f'if [ -r "/proc/$pid/cmdline" ] && tr "\\000" "\\n" < "/proc/$pid/cmdline" | grep -qxF -- {q(p.sweep)}; '
            "then echo 'alive 1'; else echo 'alive 0'; fi; "
            f'echo "points $(cat {q(p.runs)}/points 2>/dev/null || true)"; '
            f"echo \"current $(grep -o 'point [0-9]*/[0-9]*: N=[0-9]* run [0-9]*' {q(log)} 2>/dev/null | tail -n 1)\"; "
            f"if cd {q(p.sweep)} 2>/dev/null; then for d in n*-run*; do "
            'if [ -f "$d/result.json" ]; then echo "done $d"; elif [ -f "$d/error.json" ]; then echo "failed $d"; fi; '
            "done; fi"
        )

    def poll(self) -> Status:
        self.status = parse_status(self.sh(self.status_script()).stdout)
        return self.status

    def start(self, points: list[Point]) -> None:
        """`bufsize sweep --points ...` detached: setsid gives it its own session and no controlling
        terminal, so a dropped connection delivers no SIGHUP; its output goes to worker.log and its
        PID to worker.pid (checked against its command line before it is believed). Plain setsid
        rather than systemd-run: it works wherever sh does (containers, minimal images)."""
        p = self.paths
        spec_points = ",".join(f"{n}:{r}" for n, r in points)
        argv = [f"{p.src}/.venv/bin/bufsize", "sweep", *sweep_argv(self.job.spec), "--points", spec_points,
                "--out", p.sweep]  # fmt: skip
        script = (
            f"set -e; mkdir -p {q(p.runs)} {q(posixpath.dirname(p.sweep))}; cd {q(p.src)}; "
            f"printf '%s\\n' {q(spec_points)} > {q(p.runs)}/points; "
            f"mv -f {q(p.runs)}/worker.log {q(p.runs)}/worker.log.1 2>/dev/null || true; "
            f"setsid {shlex.join(argv)} > {q(p.runs)}/worker.log 2>&1 < /dev/null & "
            f"echo $! > {q(p.runs)}/worker.pid; echo $!"
        )
        res = self.sh(script)
        if res.exited != 0 or not digits(res.stdout.strip()):
            raise MachineCannotRun(f"{self.m.label}: could not start its worker: {res.stderr.strip()[-200:]}")
        self.owned = list(points)
        names = " ".join(f"N={n}/run{r}" for n, r in points)
        self.say(f"started its part (pid {res.stdout.strip()}): {len(points)} points: {names}")

    # -- pulling

    def pull(self, point: Point) -> None:
        """One finished point: tar it there, fetch it by SFTP, check its checksum, members and commit,
        and move it into the merged sweep. A point that fails the checks is reported, not merged."""
        name = point_name(point)
        p = self.paths
        remote_tgz = f"{p.runs}/pull-{name}.tar.gz"
        script = (
            f"set -e; mkdir -p {q(p.runs)}; tar -C {q(p.sweep)} -czf {q(remote_tgz)} {q(name)}; "
            f"chmod 0644 {q(remote_tgz)}; sha256sum < {q(remote_tgz)}; wc -c < {q(remote_tgz)}"
        )
        res = self.sh(script, timeout=600)
        if res.exited != 0:
            self.failed[point] = f"could not pack it there: {res.stderr.strip()[-200:]}"
            return
        # The checksum is the remote's own: it guards the transfer, not the content, which is checked
        # member by member below (paths, types, sizes) and by the commit the result names.
        answer = res.stdout.split()
        want, size = (answer[0], answer[2]) if len(answer) == 3 and digits(answer[2]) else ("", "-1")
        if not re.fullmatch(r"[0-9a-f]{64}", want) or not 0 <= int(size) <= MAX_POINT_ARCHIVE_BYTES:
            self.failed[point] = (
                f"not pulled: its archive is over {MAX_POINT_ARCHIVE_BYTES >> 20} MB, or the machine's answer "
                f"about it is not a checksum and a size ({' '.join(answer)[:80]!r})"
            )
            with contextlib.suppress(MachineUnreachable):
                self.sh(f"rm -f {q(remote_tgz)}")
            return
        work = Path(tempfile.mkdtemp(prefix=f"{self.m.path_label}-{name}-", dir=self.job.incoming))
        try:
            local = work / "point.tar.gz"
            try:
                with local.open("wb") as f:
                    self.conn.get(remote_tgz, local=f)
            except SSH_ERRORS as e:
                self.close()
                raise MachineUnreachable(explain(e, self.m, self.job.known_hosts)) from e
            with contextlib.suppress(MachineUnreachable):
                self.sh(f"rm -f {q(remote_tgz)}")
            try:
                if local.stat().st_size > MAX_POINT_ARCHIVE_BYTES:  # it grew since it was measured
                    raise BadPoint(f"its archive is over {MAX_POINT_ARCHIVE_BYTES >> 20} MB")
                if sha256_of(local) != want:
                    raise BadPoint("its checksum does not match the one computed there")
                unpacked = unpack_point(local, point, work)
                check_point(unpacked, point, self.job.commit)
            except BadPoint as e:
                self.failed[point] = f"not merged: {e}"
                self.say(f"N={point[0]} run {point[1]}: not merged: {e}")
                return
            with self.job.lock:
                if self.machine_manifest is None:
                    self.machine_manifest = self.fetch_machine_manifest()
                if merge_point(self.job.out, unpacked, point):
                    self.merged.append(point)
                    self.failed.pop(point, None)
                    update_manifest(self.job, {self.m.label: {"machine": self.machine_manifest, "points": [name]}})
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def fetch_machine_manifest(self) -> dict | None:
        res = self.sh(f"cat {q(self.paths.sweep)}/manifest.json")
        try:
            return json.loads(res.stdout)["machine"]
        except (ValueError, KeyError, TypeError):
            return None

    def stopped_early(self) -> str:
        res = self.sh(f"tail -n 2 {q(self.paths.runs)}/worker.log 2>/dev/null || true")
        last = " | ".join(line.strip() for line in res.stdout.strip().splitlines())
        return f"its worker stopped before it finished ({last or 'no log'})"

    def error_of(self, point: Point) -> str:
        res = self.sh(f"cat {q(self.paths.sweep)}/{q(point_name(point))}/error.json 2>/dev/null || true")
        try:
            return " ".join(str(json.loads(res.stdout).get("error", "failed")).split())[:300]
        except (ValueError, AttributeError):
            return "failed (its error.json does not parse)"


def update_manifest(job: Job, by_machine: dict[str, dict]) -> None:
    """Called with job.lock held."""
    old = None
    with contextlib.suppress(OSError, ValueError):
        old = json.loads((job.out / "manifest.json").read_text())
    write_manifest(job.out, merged_manifest(old, job.spec, job.commit, by_machine))


# ---------------------------------------------------------------------------------------------
# The whole command


class Run:
    def __init__(self, job: Job, remotes: list[Remote], runs_per_machine: int | None) -> None:
        self.job = job
        self.remotes = remotes
        self.runs_per_machine = runs_per_machine
        self.pending: list[Point] = []  # points no machine could take yet (all busy with earlier parts)
        self.pending_lock = threading.Lock()

    def merged_here(self, point: Point) -> bool:
        return finished(self.job.out, *point)

    def plan(self, ready: list[Remote]) -> None:
        """Who runs what: points merged here are done; points finished on some ready machine are
        pulled, not rerun; a worker still running keeps its points; the rest go to idle machines."""
        spec = self.job.spec
        todo = [p for p in spec.points() if not self.merged_here(p)]
        done_there = set().union(*(r.status.done for r in ready)) if ready else set()
        taken: set[Point] = set()
        for r in ready:
            if r.status.alive:
                r.owned = [p for p in r.status.points if p in todo and p not in r.status.done]
                taken |= set(r.owned)
        free = [p for p in todo if p not in done_there and p not in taken]
        idle = [r.m.label for r in ready if not r.status.alive]
        order = [r.m.label for r in self.remotes]
        shares = assign(free, idle, self.job.spec.estimate, self.runs_per_machine, order)
        for r in ready:
            if not r.status.alive:
                r.owned = shares.get(r.m.label, [])
        self.pending = free if not idle else []

    def watch(self, r: Remote) -> None:
        """One machine until its part is merged, it fails, or it is given up. Every SSH step is inside
        the try: a machine may stop answering at any of them."""
        last_ok = time.monotonic()
        silent = False
        while True:
            try:
                outcome = self.step(r)
                last_ok = time.monotonic()
                if silent:
                    r.say("answering again")
                silent = False
            except MachineUnreachable as e:
                if time.monotonic() - last_ok > self.job.give_up_s:
                    r.error = f"{e}; gave up after {self.job.give_up_s:g} s without an answer"
                    r.say(f"lost: {e}")
                    return
                if not silent:
                    r.say(f"no answer ({e}); retrying for up to {self.job.give_up_s:g} s")
                silent = True
                time.sleep(self.job.poll_s)
                continue
            except MachineCannotRun as e:
                r.error = str(e)
                r.say(str(e))
                return
            if outcome == "done":
                return
            if outcome == "wait":
                time.sleep(self.job.poll_s)

    def step(self, r: Remote) -> str:
        """One look at a machine: start its part the first time, pull what is settled, report.
        'done' when its part is over, 'again' to look at once, 'wait' to look after --poll-s."""
        st = r.poll()
        if not r.started:
            todo = [p for p in r.owned if p not in st.done and not self.merged_here(p)]
            if todo and not st.alive:
                r.start(todo)
                st = r.poll()
            r.started = True
        for point in sorted(st.settled(), key=lambda p: (p[1], p[0])):
            if not self.merged_here(point) and point not in r.failed:
                r.pull(point)
        left = [p for p in r.owned if not self.merged_here(p)]
        line = f"{len(r.owned) - len(left)}/{len(r.owned)} points merged"
        if st.alive and st.current:
            line += f", running N={st.current[0]} run {st.current[1]}"
        if line != r.last_line:
            r.say(line)
            r.last_line = line
        if st.alive:
            return "wait"
        if any(p in st.done and not self.merged_here(p) and p not in r.failed for p in left):
            return "again"  # finished there after the last look: pull them first
        for p in left:
            if p not in r.failed:
                r.failed[p] = r.error_of(p) if p in st.failed else r.stopped_early()
        with self.pending_lock:
            more, self.pending = self.pending, []
        if not more:
            return "done"
        try:
            r.start(more)
        except (MachineUnreachable, MachineCannotRun):
            with self.pending_lock:
                self.pending = more + self.pending
            raise
        r.last_line = ""
        return "again"


def run_remote(a: argparse.Namespace) -> int:
    t0 = time.monotonic()
    spec = spec_from_args(a)
    machines = parse_machines(a.machine)
    runs_per_machine = None
    if a.replicate:
        runs_per_machine = spec.runs
        spec = replace(spec, runs=spec.runs * len(machines))
        spec.validate()
    if not (0.1 <= a.poll_s <= 3600):
        raise UsageError(f"--poll-s {a.poll_s:g}: must be from 0.1 to 3600")
    if not (0 <= a.give_up_s <= 7 * 86400):
        raise UsageError(f"--give-up-s {a.give_up_s:g}: must be from 0 to a week")
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
            job = Job(spec, commit, tarball, identity, known_hosts, remote_dir, out, Path(tmp), a.poll_s,
                      a.give_up_s, say, json=a.json)  # fmt: skip
            remotes = [Remote(m, job) for m in machines]
            try:
                return drive(job, remotes, runs_per_machine, t0)
            except KeyboardInterrupt:
                say(
                    "bufsize remote: interrupted; the parts already started keep running on their machines: "
                    "re-run the same command to collect them"
                )
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
    already = sum(finished(job.out, *p) for p in spec.points())
    job.say(
        f"bufsize remote: {total} points ({len(spec.flows)} N x {spec.runs} runs) on {len(remotes)} machines, "
        f"commit {job.commit[:12]}; {already} already merged in {job.out}"
    )
    for r in remotes:
        r.new_connection()
    in_threads(remotes, Remote.prepare)
    ready = [r for r in remotes if r.error is None]
    for r in remotes:
        if r.error is not None:
            job.say(f"[{r.m.label}] cannot be used: {r.error}")
    if not ready:
        raise RunError("no machine could be used (see the lines above); nothing was started")

    def first_look(r: Remote) -> None:
        try:
            r.poll()
        except (MachineUnreachable, MachineCannotRun) as e:
            r.error = str(e)

    in_threads(ready, first_look)
    for r in ready:
        if r.error is not None:
            job.say(f"[{r.m.label}] cannot be used: {r.error}")
    ready = [r for r in ready if r.error is None]
    if not ready:
        raise RunError("no machine could be used (see the lines above); nothing was started")
    runner = Run(job, remotes, runs_per_machine)
    runner.plan(ready)
    in_threads(ready, runner.watch)

    merged = [p for p in spec.points() if finished(job.out, *p)]
    missing = [p for p in spec.points() if p not in merged]
    job.say(f"bufsize remote: {len(merged)}/{total} points merged in {clock(time.monotonic() - t0)}")
    for r in remotes:
        for p, why in sorted(r.failed.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            if p in missing:
                job.say(f"[{r.m.label}] N={p[0]} run {p[1]}: {why}")
        if r.error is not None and r in ready:
            left = [p for p in r.owned if p in missing]
            job.say(f"[{r.m.label}] {r.error}; its unfinished points: {names(left) or 'none'}")
    paths = []
    if merged:
        from bufsize.longlived.report import make_report

        paths = make_report(job.out)
    if job.json:
        print(json.dumps({"out": str(job.out), "points": total, "finished": len(merged), "missing": names(missing),
                          "wrote": [str(p) for p in paths], "table": table_rows(job.out) if paths else []},
                         indent=1))  # fmt: skip
    for path in [] if job.json else paths:
        print(f"wrote {path}")
    if missing:
        job.say(f"bufsize remote: {len(missing)} point(s) not merged ({names(missing)}); re-run the same command")
        return 1
    return 0


def remote_plan(out: Path, spec: SweepSpec, machines: list, commit: str, runs_per_machine: int | None) -> dict:
    """Who would run which point, and for about how long, if every machine were ready (nothing is
    contacted: the real run assigns again to the machines that answer, from the same estimates)."""
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
