"""Where a sweep's point tasks run: a Dask distributed cluster.

A point is a self-contained task (its spec in, its directory filled), so an existing engine can run
it and reschedule it when its worker dies; the toolkit only merges and reports. Here: `LocalCluster`,
worker processes on this machine, one thread each (a twin point is one single-threaded simulator).
Everything listens on loopback only: the scheduler, the workers and the dashboard, which is the
sweep's live page. Dask is imported here, when a sweep asks for a cluster, not by the command line.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Iterator
from typing import Any

LOOPBACK = "127.0.0.1"


@contextlib.contextmanager
def local_cluster(workers: int) -> Iterator[Any]:
    """A `Client` on a LocalCluster of `workers` processes, closed (its workers ended) on the way out."""
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
        )
    try:
        with Client(cluster) as client:
            yield client
    finally:
        cluster.close()
        scratch.cleanup()


def dashboard(client: Any) -> str:
    """The live page's address, or why there is none (the dashboard needs bokeh)."""
    link = getattr(client, "dashboard_link", None)
    return str(link) if link else "none (install bokeh for Dask's dashboard)"
