"""A single-node Slurm cluster of the test's own: munged, slurmctld and slurmd started as root on
localhost from a private directory (key, sockets, state, logs, configuration), on free ports, and
ended by PID with every job of theirs. Nothing of the system's Slurm or munge is read or started:
the commands find this cluster through SLURM_CONF, set only for the test."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

DAEMONS = ("munged", "slurmctld", "slurmd")
PARTITION = "bufsize"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def missing() -> list[str]:
    return [c for c in (*DAEMONS, "sbatch", "squeue", "scancel", "sinfo") if shutil.which(c) is None]


def config(d: Path) -> str:
    node = socket.gethostname().split(".")[0]  # slurmd finds its node by the short host name
    memory_mb = int(psutil.virtual_memory().total / 2**20 * 0.8)
    lines = [
        "ClusterName=bufsizetest",
        f"SlurmctldHost={node}(127.0.0.1)",
        f"SlurmctldPort={free_port()}",
        f"SlurmdPort={free_port()}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={d / 'munge.sock'}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={d / 'state'}",
        f"SlurmdSpoolDir={d / 'spool'}",
        f"SlurmctldPidFile={d / 'slurmctld.pid'}",
        f"SlurmdPidFile={d / 'slurmd.pid'}",
        f"SlurmctldLogFile={d / 'slurmctld.log'}",
        f"SlurmdLogFile={d / 'slurmd.log'}",
        # No cgroups and no accounting: a plain single node that any Linux with /proc runs.
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "ReturnToService=2",
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} RealMemory={memory_mb} State=UNKNOWN",
        f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
    ]
    return "\n".join(lines) + "\n"


def wait_idle(env: dict[str, str], deadline_s: float = 30) -> None:
    """Until the node reports idle: jobs submitted before then would wait for it."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        r = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, env=env)
        if r.returncode == 0 and r.stdout.strip() == "idle":
            return
        time.sleep(0.3)
    raise RuntimeError(f"the test's Slurm node did not come up in {deadline_s} s: sinfo says {r.stdout or r.stderr}")


def jobs(env: dict[str, str]) -> list[str]:
    r = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, env=env)
    return r.stdout.split()


@contextlib.contextmanager
def single_node_slurm(d: Path) -> Iterator[dict[str, str]]:
    """The environment (SLURM_CONF set) of a running one-node cluster in `d`; on the way out its jobs
    are cancelled and its daemons, and any process left of its jobs, ended."""
    for sub in ("state", "spool"):
        (d / sub).mkdir(parents=True)
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    (d / "slurm.conf").write_text(config(d))
    env = dict(os.environ, SLURM_CONF=str(d / "slurm.conf"))
    munge = ["munged", "-F", "-f", f"--socket={d / 'munge.sock'}", f"--key-file={key}",
             f"--pid-file={d / 'munged.pid'}", f"--seed-file={d / 'munged.seed'}",
             f"--log-file={d / 'munged.log'}"]  # fmt: skip
    started: list[subprocess.Popen] = []
    try:
        for argv in (munge, ["slurmctld", "-D", "-i"], ["slurmd", "-D"]):
            log = open(d / f"{argv[0]}.out", "w")  # noqa: SIM115 - the daemon's, closed with it below
            started.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT))
            log.close()
            time.sleep(0.3 if argv[0] == "munged" else 0)  # its socket before slurm asks for credentials
        wait_idle(env)
        yield env
    finally:
        if started:
            for job in jobs(env):
                subprocess.run(["scancel", job], env=env, capture_output=True)
            end = time.monotonic() + 30
            while jobs(env) and time.monotonic() < end:
                time.sleep(0.3)
        # A job's processes run under slurmstepd, which slurmd leaves running on its own: those of
        # this cluster (their environment names its configuration) end by PID before the daemons.
        family = [k for s in steps_of(env["SLURM_CONF"]) for k in [s, *s.children(recursive=True)]]
        daemons = [p for p in started if p.poll() is None]
        for p in [*family, *reversed(daemons)]:
            with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
                p.terminate()
        _, alive = psutil.wait_procs(family, timeout=15)
        for p in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        for p in started:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def steps_of(conf: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["name"]):
        if p.info["name"] == "slurmstepd":
            with contextlib.suppress(psutil.Error):
                if p.environ().get("SLURM_CONF") == conf:
                    found.append(p)
    return found
