"""Where a sweep's point tasks run: a Dask distributed cluster, on this machine or on Slurm.

A point is a self-contained task (its spec in, its directory filled), so an existing engine can run
it and reschedule it when its worker dies; the toolkit only merges and reports. Each worker is one
process with one thread: a twin point is one single-threaded simulator.

- local: `LocalCluster`, worker processes on this machine. Everything listens on loopback only: the
  scheduler, the workers and the dashboard, which is the sweep's live page.
- slurm: dask-jobqueue's `SLURMCluster`, each worker a Slurm job of one core, submitted with sbatch
  and configured by dask-jobqueue's own file (~/.config/dask/jobqueue.yaml: partition, account,
  walltime, memory). The nodes reach the scheduler over the network, so scheduler and workers speak
  TLS with certificates made for this sweep (`Security.temporary`); the workers serve no dashboard
  and the scheduler's is on loopback (reach it through an SSH tunnel). The workers write each point
  straight into the sweep's directory, so it and the checkout must be on storage the nodes share.

Dask is imported here, when a sweep asks for a cluster, not by the command line.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bufsize.topologies.errors import UsageError

LOOPBACK = "127.0.0.1"
KINDS = ("local", "slurm")
# A Slurm job must ask for memory: a twin point of 800 flows at 62.5 Mb/s peaks under 300 MB, and a
# faster link holds more packets at once; jobqueue.yaml's `memory` replaces this.
SLURM_MEMORY = "2GB"


@dataclass(frozen=True)
class Where:
    """Where a sweep's points run: `workers` worker processes on this machine, or that many Slurm
    jobs at most, whose workers reach this machine's scheduler at `scheduler_host`."""

    kind: str = "local"
    workers: int = 1
    scheduler_host: str | None = None

    def describe(self) -> str:
        if self.kind == "local":
            return f"{self.workers} Dask workers on this machine"
        return f"up to {self.workers} Slurm jobs of one Dask worker each, scheduler at {self.host()} over TLS"

    def host(self) -> str:
        return self.scheduler_host or socket.getfqdn()

    def check(self) -> None:
        """Refuse, before the sweep's directory is touched, a cluster that cannot take its workers."""
        if self.kind == "slurm":
            check_slurm()


@contextlib.contextmanager
def open_cluster(where: Where, scratch_parent: Path, points: int) -> Iterator[Any]:
    """A `Client` on the cluster `where` names, for `points` tasks; its workers ended and its scratch
    removed on the way out."""
    if where.kind == "slurm":
        with slurm_cluster(where, scratch_parent, points) as client:
            yield client
    else:
        with local_cluster(where.workers) as client:
            yield client


@contextlib.contextmanager
def local_cluster(workers: int, security: Any = None) -> Iterator[Any]:
    """A `Client` on a LocalCluster of `workers` processes, closed (its workers ended) on the way out;
    its scheduler speaks TLS when given the `security` to (workers that join it from elsewhere)."""
    import dask
    from distributed import Client, LocalCluster

    # The workers' scratch space (lock files, spilled data) in a directory of the sweep's own, removed
    # after: Dask's default, /tmp/dask-scratch-space, outlives the cluster.
    scratch = tempfile.TemporaryDirectory(prefix="bufsize-dask-")
    with dask.config.set({"temporary-directory": scratch.name}):
        cluster = LocalCluster(
            local_directory=scratch.name,
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            host=LOOPBACK,
            dashboard_address=f"{LOOPBACK}:0",  # a free port, never a public address
            memory_limit=0,  # a simulator's memory is its own process's, which Dask cannot see or pause
            silence_logs=logging.ERROR,
            **({"security": security, "protocol": "tls://"} if security is not None else {}),
        )
    try:
        with Client(cluster) as client:
            yield client
    finally:
        cluster.close()
        scratch.cleanup()


@contextlib.contextmanager
def slurm_cluster(where: Where, scratch_parent: Path, points: int) -> Iterator[Any]:
    """A `Client` on a SLURMCluster of at most `where.workers` jobs; the jobs are cancelled on the way out.

    The scratch (the workers' certificates, their lock files and the jobs' logs) is a private
    directory inside the sweep's, shared with the nodes as the points are, and removed after; when
    the cluster fails to start it stays, and the error names it."""
    import dask
    from dask_jobqueue import SLURMCluster
    from distributed import Client

    scratch = Path(tempfile.mkdtemp(prefix=".cluster-", dir=scratch_parent))  # mode 0700: the keys are in it
    memory = dask.config.get("jobqueue.slurm.memory", None) or SLURM_MEMORY
    try:
        # The scheduler here keeps its lock files in the scratch too, not in /tmp/dask-scratch-space.
        with dask.config.set({"temporary-directory": str(scratch)}):
            cluster = SLURMCluster(
                cores=1,
                processes=1,
                memory=memory,
                python=sys.executable,  # this checkout's environment, on the shared storage
                security=sweep_security(scratch),
                local_directory=str(scratch),
                log_directory=str(scratch / "logs"),
                worker_extra_args=["--no-dashboard"],  # a worker's dashboard would be plain HTTP on the node
                scheduler_options={"host": where.host(), "dashboard_address": f"{LOOPBACK}:0"},
                silence_logs=logging.ERROR,
            )
    except Exception as e:
        raise RuntimeError(f"the Slurm cluster did not start ({e}); its scratch is {scratch}") from e
    try:
        # As many jobs as there are points, up to the limit. A job that ends early (a cancel, a node
        # lost, its walltime) leaves its point to run again on the jobs that remain; dask-jobqueue
        # does not submit another job in its place, so the walltime should outlast the sweep.
        cluster.scale(jobs=min(where.workers, points))
        with Client(cluster) as client:
            yield client
    finally:
        cluster.close()
        shutil.rmtree(scratch, ignore_errors=True)


def check_slurm(timeout_s: float = 20) -> None:
    """Refuse at once where Slurm cannot take jobs: else sbatch fails (or waits) inside the engine, and
    the sweep waits for ever for workers that were never submitted."""
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        raise UsageError("--cluster slurm: no sinfo or sbatch here; run the sweep where Slurm jobs are submitted")
    try:
        r = subprocess.run(["sinfo", "-h", "-o", "%P %a"], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise UsageError(f"--cluster slurm: Slurm's controller did not answer sinfo in {timeout_s:.0f} s") from None
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or ["no reason given"])[-1]
        raise UsageError(f"--cluster slurm: Slurm does not answer ({why})")


TLS_FIELDS = ("tls_ca_file", "tls_scheduler_cert", "tls_scheduler_key", "tls_worker_cert", "tls_worker_key",
              "tls_client_cert", "tls_client_key")  # fmt: skip


def sweep_security(scratch: Path) -> Any:
    """TLS for this sweep alone: Dask's self-signed certificate and key, made now, as files in the
    private scratch that the nodes read (each a file of ours, so removing the scratch removes them)."""
    from distributed.security import Security

    made = Security.temporary()
    files = {}
    for name in TLS_FIELDS:
        path = scratch / f"{name}.pem"
        path.touch(mode=0o600)
        path.write_text(getattr(made, name))
        files[name] = str(path)
    return Security(require_encryption=True, **files)


def dashboard(client: Any) -> str:
    """The live page's address, or why there is none (the dashboard needs bokeh)."""
    link = getattr(client, "dashboard_link", None)
    return str(link) if link else "none (install bokeh for Dask's dashboard)"


def place() -> str:
    """Where this process runs, for a point's log: the host, and the Slurm job when it is one."""
    job = os.environ.get("SLURM_JOB_ID")
    return socket.gethostname() + (f", Slurm job {job}" if job else "")
