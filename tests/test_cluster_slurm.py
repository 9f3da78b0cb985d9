"""A twin sweep on a Slurm cluster through dask-jobqueue: a real single-node Slurm (munged, slurmctld,
slurmd) started by the test as root on localhost, each Dask worker a Slurm job. Checks what
docs/cloud.md claims: the points run as Slurm jobs and land in the sweep's directory, scheduler and
workers speak TLS with the sweep's own certificates and no worker serves a dashboard, nothing of the
cluster is left in the directory, a cancelled job's point runs again in another job and is merged
once, and resuming skips the merged points."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import psutil
import pytest
from conftest import BUFSIZE, killed_if_left
from slurmnode import jobs, missing, single_node_slurm

from bufsize.scaffold.cluster import Where, open_cluster, place
from bufsize.topologies.nssim import HELPER

# Small, quick points (seconds each) at 10 Mb/s and 20 ms, on the twin.
SMALL = ["--rate-mbps", "10", "--rtt-ms", "20", "--cc", "reno", "--precision", "0.2"]


@pytest.fixture
def slurm(root, tmp_path, monkeypatch):
    """The environment of a one-node Slurm cluster of this test's own (SLURM_CONF set here too)."""
    if missing():
        pytest.fail(f"Slurm's commands are missing ({', '.join(missing())}): ./setup.sh test installs them")
    with single_node_slurm(tmp_path / "slurm") as env:
        monkeypatch.setenv("SLURM_CONF", env["SLURM_CONF"])
        yield env


def test_a_slurm_that_cannot_take_jobs_is_refused_before_the_sweep_begins(tmp_path):
    """Else sbatch fails inside the engine and the sweep waits for ever for workers never submitted."""
    if missing():
        pytest.fail(f"Slurm's commands are missing ({', '.join(missing())}): ./setup.sh test installs them")
    conf = tmp_path / "slurm.conf"
    conf.write_text("")  # a Slurm whose configuration names no controller
    out = tmp_path / "sweep"
    res = subprocess.run(twin_sweep(out, "10", 1, SMALL), capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, SLURM_CONF=str(conf)))  # fmt: skip
    assert res.returncode == 2 and "--cluster slurm: Slurm does not answer (sinfo: fatal:" in res.stderr, res.stderr
    assert not out.exists()


def test_a_slurm_worker_is_a_job_that_speaks_tls_and_serves_no_page(slurm, tmp_path):
    out = tmp_path / "sweep"
    out.mkdir()
    with open_cluster(Where("slurm", 1, "127.0.0.1"), out, 1) as client:
        assert client.scheduler.address.startswith("tls://127.0.0.1:"), client.scheduler.address
        script = client.cluster.job_script()
        assert "--no-dashboard" in script and "--protocol tls://" in script, script
        assert re.search(r"--tls-key \S+/\.cluster-\w+/tls_worker_key\.pem", script), script
        assert client.dashboard_link.startswith("http://127.0.0.1:"), client.dashboard_link
        where = client.submit(place, pure=False).result(timeout=120)
        assert re.fullmatch(r".+, Slurm job \d+", where), where
        (scratch,) = out.glob(".cluster-*")
        assert scratch.stat().st_mode & 0o077 == 0  # the sweep's key is readable by its owner alone
        assert (scratch / "tls_worker_key.pem").stat().st_mode & 0o077 == 0
    assert list(out.iterdir()) == []  # certificates, lock files and the jobs' logs removed


def twin_sweep(out, flows: str, workers: int, extra: list[str]) -> list[str]:
    return [BUFSIZE, "sim", "sweep", "--cluster", "slurm", "--workers", str(workers), "--scheduler-host",
            "127.0.0.1", "--flows", flows, "--seeds", "1", *extra, "--out", str(out)]  # fmt: skip


def test_twin_sweep_on_slurm_writes_every_point_and_resumes(slurm, tmp_path):
    out = tmp_path / "sweep"
    args = twin_sweep(out, "10,20", 2, SMALL)
    res = subprocess.run(args, capture_output=True, text=True, timeout=300, env=slurm)
    assert res.returncode == 0, res.stderr
    assert "Slurm jobs of one Dask worker each, scheduler at 127.0.0.1 over TLS" in res.stderr
    for n in (10, 20):
        d = out / f"n{n:04d}-run1"
        result = json.loads((d / "result.json").read_text())
        assert result["flows"] == n and result["kind"] == "sim-search" and result["buffer_packets"] >= 1
        assert re.match(rf"point N={n} seed 1 on .+, Slurm job \d+\n", (d / "search.log").read_text())
    # The sweep's own files; nothing of the cluster (certificates, lock files, the jobs' logs).
    names = {p.name for p in out.iterdir()}
    assert {"manifest.json", "table.md", "figure.png"} <= names and not [n for n in names if ".cluster" in n]
    again = subprocess.run(args, capture_output=True, text=True, timeout=300, env=slurm)
    assert again.returncode == 0 and "2 of 2 points already finished" in again.stderr, again.stderr


def simulating(conf: str, count: int, deadline_s: float = 120) -> list[psutil.Process]:
    """The simulators of this cluster's jobs (their environment names its configuration), once `count` run."""
    end = time.monotonic() + deadline_s
    found: list[psutil.Process] = []
    while time.monotonic() < end and len(found) < count:
        time.sleep(0.2)
        found = []
        for p in psutil.process_iter(["name"]):
            if p.info["name"] == HELPER.name:
                try:
                    if p.environ().get("SLURM_CONF") == conf:
                        found.append(p)
                except psutil.Error:
                    continue
    assert len(found) >= count, f"{count} points should be simulating in Slurm jobs"
    return found


@pytest.mark.extensive  # the long form: make test-extensive
def test_a_cancelled_jobs_point_runs_again_in_another_job_and_is_merged_once(slurm, tmp_path):
    """scancel of the job running a point, part-way through its search: the point runs again on the
    job that remains (dask-jobqueue does not replace a job), and the sweep reports each point once."""
    out = tmp_path / "sweep"
    started = subprocess.Popen(twin_sweep(out, "40,30", 2, ["--cc", "reno"]), stderr=subprocess.PIPE, text=True,
                               env=slurm)  # fmt: skip
    with killed_if_left(started) as sweep:
        victim = simulating(slurm["SLURM_CONF"], 2)[0]
        job = victim.environ()["SLURM_JOB_ID"]
        time.sleep(1)
        subprocess.run(["scancel", job], env=slurm, check=True)
        _, err = sweep.communicate(timeout=300)
    assert sweep.returncode == 0, err
    reran = 0
    for n in (40, 30):
        d = out / f"n{n:04d}-run1"
        result = json.loads((d / "result.json").read_text())
        assert result["flows"] == n and result["buffer_packets"] >= 1 and not (d / "error.json").exists()
        assert err.count(f"point N={n} seed 1:") == 1, err  # each point reported (merged) once
        ran_in = re.match(r"point N=\d+ seed 1 on .+, Slurm job (\d+)\n", (d / "search.log").read_text())
        assert ran_in is not None
        reran += ran_in.group(1) != job
    assert reran == 2, "both points' final runs should be in the job that was not cancelled"
    assert psutil.wait_procs([victim], timeout=30)[1] == [], "the cancelled job's simulator is still running"
    assert job not in jobs(slurm)
    assert os.listdir(out).count("manifest.json") == 1 and not list(out.glob(".cluster-*"))
