"""The task a `bufsize remote` worker runs for one point, on its own machine: `bufsize sweep` for that
point alone, into the machine's sweep directory, then the point's directory as a gzipped tar that
the engine carries back to be checked and merged (remote/plan.py).

The Dask worker on the remote machine imports this from the shipped commit's environment.
"""

from __future__ import annotations

import ctypes
import io
import json
import signal
import subprocess
import tarfile
from pathlib import Path

from bufsize.longlived.points import error_of
from bufsize.remote.plan import MAX_POINT_ARCHIVE_BYTES, point_name

SRC = Path(__file__).resolve().parents[2]  # the shipped tree: REMOTE_DIR/src/COMMIT
PR_SET_PDEATHSIG = 1


class PointFailed(Exception):
    """The point's search ended without a result; the message says why, from its error.json or log."""


def die_with_worker() -> None:
    """In the child, before exec: SIGTERM when the worker's thread that started it dies. A worker
    killed outright (SIGKILL, a lost machine's session) then still has its point tear its namespaces
    down; the search handles SIGTERM as a stop. The child runs in a session of its own, so that this
    is the one signal it gets: the worker's terminal hanging up would send SIGHUP at the same moment,
    and a second stop arriving while the first begins the teardown can cut it short."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def run_point(argv: list[str], sweep_id: str, n: int, r: int) -> dict:
    """Point (n, r) of the sweep `argv` describes, in this machine's sweep directory for `sweep_id`;
    its directory as an archive, the machine's manifest, and the name of the worker that ran it. A
    point finished there by an earlier run that never reached the merge is not run again: the sweep
    skips it. The paths are this checkout's own: REMOTE_DIR/src/COMMIT, beside sweeps/ and runs/."""
    from distributed import get_worker

    root = SRC.parents[1]
    sweep, logs = root / "sweeps" / sweep_id, root / "runs" / sweep_id
    name = point_name((n, r))
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}.log"
    with log.open("ab") as out:
        res = subprocess.run([str(SRC / ".venv" / "bin" / "bufsize"), "sweep", *argv, "--points", f"{n}:{r}",
                              "--out", str(sweep)],
                             stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True, preexec_fn=die_with_worker, check=False)  # fmt: skip
    d = sweep / name
    if not (d / "result.json").is_file():
        raise PointFailed(why(d, log, res.returncode))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(d, arcname=name)
    if buf.tell() > MAX_POINT_ARCHIVE_BYTES:
        raise PointFailed(f"its archive is over {MAX_POINT_ARCHIVE_BYTES >> 20} MB")
    try:
        machine = json.loads((sweep / "manifest.json").read_text()).get("machine")
    except (OSError, ValueError, AttributeError):
        machine = None
    return {"archive": buf.getvalue(), "machine": machine, "worker": get_worker().name}


def why(d: Path, log: Path, returncode: int) -> str:
    """The point's own error.json, else the last lines of its log."""
    said = error_of(d)
    if said is not None:
        return " ".join(said.split())[:300]
    try:
        tail = log.read_text(errors="replace").strip().splitlines()[-2:]
    except OSError:
        tail = []
    return f"bufsize sweep exited {returncode} without a result ({' | '.join(tail) or 'no log'})"
