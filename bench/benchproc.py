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


def finish_or_tear_down(args: list[str]) -> subprocess.CompletedProcess:
    """Run args and return its output; on Ctrl-C pass one SIGINT on, wait for the teardown, re-raise.

    The child runs in a session of its own, so a terminal's Ctrl-C (sent to the whole foreground
    group) reaches the bench only and the child gets exactly one SIGINT, from here: a second one in
    the instant before its teardown starts could cut the teardown short."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        proc.wait()
        raise
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def run_main(main: Callable[[], int], stopped: str) -> None:
    """Run a bench's main with SIGINT honoured; Ctrl-C ends it with the one line `stopped` (the
    command it was running has torn its dumbbell down, finish_or_tear_down)."""
    stop_on_sigint()
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:
        sys.exit(stopped)
