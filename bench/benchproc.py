"""Starting `bufsize` from a bench script so that Ctrl-C (or kill -INT) ends it cleanly.

subprocess.run answers a KeyboardInterrupt by SIGKILLing its child, which leaves the child's
namespaces and settings to `bufsize clean` (2026-11-29: 73 namespaces left so). And a bench
started in the background from a script (`setsid bash -c '...' &`) inherits SIGINT ignored,
which Python keeps: kill -INT then stops the running command but not the bench's loop.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable


def stop_on_sigint() -> None:
    """Make SIGINT raise KeyboardInterrupt even when the bench was started with it ignored."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


def finish_or_tear_down(
    args: list[str], *, capture: bool = True, env: dict[str, str] | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess:
    """Run args and return its exit code and (with capture) output; on Ctrl-C or past `timeout`
    pass one SIGINT on, wait for the teardown, and re-raise (subprocess.run would SIGKILL it).

    The child runs in a session of its own, so a terminal's Ctrl-C (sent to the whole foreground
    group) reaches the bench only and the child gets exactly one SIGINT, from here: a second one in
    the instant before its teardown starts could cut the teardown short."""
    pipe = subprocess.PIPE if capture else None
    proc = subprocess.Popen(args, stdout=pipe, stderr=pipe, text=True, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except (KeyboardInterrupt, subprocess.TimeoutExpired):
        proc.send_signal(signal.SIGINT)
        proc.wait()
        raise
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def run_main(main: Callable[[], int | None], stopped: str) -> None:
    """Run a bench's main with SIGINT honoured; Ctrl-C ends it with the one line `stopped` (the
    command it was running has torn its dumbbell down, finish_or_tear_down)."""
    stop_on_sigint()
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:
        sys.exit(stopped)
