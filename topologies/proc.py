"""Running commands (always as argument lists) and tracking the processes a run starts."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence

from bufsize.topologies.errors import RunError

PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)  # resolved before any fork: the child only calls it
_prctl = _libc.prctl


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


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A preexec_fn: the child gets `sig` when the thread that started it dies (PR_SET_PDEATHSIG).

    So a `kill -9` of bufsize does not leave `iperf -t 86400` or the real-time spinning delay line
    running. The setting survives nsenter's execve and the program's (neither is setuid). It
    follows the *thread* that forked, so long-lived processes must be started from the main thread.
    """
    parent = os.getpid()

    def preexec() -> None:
        _prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def popen_dying_with_parent(argv: Sequence[str], **kw) -> subprocess.Popen:
    """subprocess.Popen(argv) whose process is killed if this process dies (see die_with_parent)."""
    return subprocess.Popen(list(argv), preexec_fn=die_with_parent(), **kw)


def set_timer_slack(pid: int, slack_ns: int) -> int:
    """Let every thread of a running process end its timed sleeps up to slack_ns late (each thread's
    /proc/TID/timerslack_ns, root only), so the kernel can batch the wake-ups of a program that polls.
    Returns the threads changed; a process or thread that has ended is skipped."""
    changed = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tids:
        try:
            with open(f"/proc/{tid}/timerslack_ns", "w") as f:
                f.write(str(slack_ns))
            changed += 1
        except OSError:
            pass
    return changed


def describe_exit(returncode: int | None) -> str:
    """'killed by SIGKILL' or 'exit status 1', for messages about a process that ended."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def sleep_checked(seconds: float, check: Callable[[], None] | None, every: float = 0.2) -> None:
    """Sleep `seconds`, calling check() every `every` s, so a dead process or stalled path raises
    within a fraction of a second instead of after a long settle or sample time."""
    end = time.monotonic() + seconds
    while True:
        if check is not None:
            check()
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(every, left))


def status(pid: int) -> str | None:
    """psutil's status of the process (psutil.STATUS_RUNNING, _STOPPED, _ZOMBIE ...), or None if it is gone."""
    import psutil  # here: `mn --custom` loads this layer under Debian's python3, which has no psutil

    try:
        return psutil.Process(pid).status()
    except psutil.Error:
        return None


def parent_pid(pid: int) -> int | None:
    import psutil

    try:
        return psutil.Process(pid).ppid()
    except psutil.Error:
        return None


def net_ns_id(pid: int) -> tuple[int, int] | None:
    """(device, inode) of the process's network namespace, comparable with os.stat of /run/netns/NAME."""
    try:
        st = os.stat(f"/proc/{pid}/ns/net")
    except OSError:
        return None
    return st.st_dev, st.st_ino


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or None.

    Recorded with every PID so that a later cleanup never signals a different process that
    happens to have been given the same PID. Read here rather than as psutil's create_time(): that is
    a float (boot time + ticks / HZ) and the ledgers compare an exact integer, also across versions.
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


def stop_process(pid: int, started: int | None, grace: float = 2.0, netns: tuple[int, int] | None = None) -> bool:
    """SIGTERM, then SIGKILL after `grace` seconds, a process we started. Returns True if it was ours.

    The process is held by a pidfd before it is checked (start time, and with `netns` its network
    namespace), and signalled through it: a PID reused between the check and the signal cannot be hit.
    """
    try:
        fd: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except OSError:  # a kernel without pidfd_open (before 5.3): check and signal by PID
        fd = None
    try:
        if not is_same_process(pid, started) or (netns is not None and net_ns_id(pid) != netns):
            return False
        if not _signal(pid, fd, signal.SIGTERM):
            return True
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if not is_same_process(pid, started) or _is_zombie(pid):
                _reap(pid)
                return True
            time.sleep(0.02)
        _signal(pid, fd, signal.SIGKILL)
        _reap(pid)
        return True
    finally:
        if fd is not None:
            os.close(fd)


def _signal(pid: int, fd: int | None, sig: int) -> bool:
    """False if the process is gone."""
    try:
        if fd is not None:
            signal.pidfd_send_signal(fd, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def _is_zombie(pid: int) -> bool:
    return status(pid) in (None, "zombie", "dead")  # psutil.STATUS_ZOMBIE, STATUS_DEAD


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
