"""Running commands (always as argument lists) and tracking the processes a run starts."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence

from topologies.errors import RunError


def run(
    argv: Sequence[str], *, check: bool = True, input: str | None = None, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """Run a command to completion; raise RunError naming the command and its stderr on failure."""
    try:
        res = subprocess.run(list(argv), input=input, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as e:
        raise RunError(f"command not found: {argv[0]}") from e
    except subprocess.TimeoutExpired as e:
        raise RunError(f"command timed out after {timeout:.0f} s: {' '.join(argv)}") from e
    if check and res.returncode != 0:
        msg = (res.stderr or res.stdout).strip().splitlines()
        detail = msg[-1] if msg else f"exit status {res.returncode}"
        raise RunError(f"{' '.join(argv[:6])}{' ...' if len(argv) > 6 else ''}: {detail}")
    return res


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or None.

    Recorded with every PID so that a later cleanup never signals a different process that
    happens to have been given the same PID.
    """
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses; fields after it are plain.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


def is_same_process(pid: int, started: int | None) -> bool:
    return started is not None and start_time(pid) == started


def is_running(pid: int, started: int | None) -> bool:
    """Our process and not a zombie (an orphan's exit may wait a while for init to reap it)."""
    return is_same_process(pid, started) and not _is_zombie(pid)


def stop_process(pid: int, started: int | None, grace: float = 2.0) -> bool:
    """SIGTERM, then SIGKILL after `grace` seconds, a process we started. Returns True if it was ours."""
    if not is_same_process(pid, started):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not is_same_process(pid, started) or _is_zombie(pid):
            _reap(pid)
            return True
        time.sleep(0.02)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _reap(pid)
    return True


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def _reap(pid: int) -> None:
    """Collect the exit status if the process is our child; harmless otherwise."""
    for _ in range(50):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done:
            return
        time.sleep(0.01)
