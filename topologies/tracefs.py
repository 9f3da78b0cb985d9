"""Where tracefs is and which tracepoints exist (the fidelity and cwnd monitors use private instances)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from bufsize.topologies.proc import run

TRACEFS_CANDIDATES = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
TRACEPOINTS = ("qdisc/qdisc_dequeue", "qdisc/qdisc_enqueue", "net/net_dev_xmit", "tcp/tcp_probe")
# Private instances are named bsz-<what>-<owner pid>, so a crash's leftovers can be told from a live run's.
INSTANCE_PREFIX = "bsz-"


def tracefs_root() -> str | None:
    for root in TRACEFS_CANDIDATES:
        if os.path.isdir(os.path.join(root, "events")):
            return root
    return None


def tracepoints() -> dict[str, bool]:
    """Which tracepoints exist. tracefs is mounted if the kernel has it but nobody mounted it."""
    root = tracefs_root()
    if root is None and os.path.isdir("/sys/kernel/tracing"):
        run(["mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing"], check=False)
        root = tracefs_root()
    return {tp: bool(root) and os.path.isdir(os.path.join(root, "events", tp)) for tp in TRACEPOINTS}


def instance_overruns(instance: Path) -> int:
    """Events a trace instance's kernel ring buffer dropped because it was full, summed over CPUs."""
    total = 0
    for stats in (instance / "per_cpu").glob("cpu*/stats"):
        m = re.search(r"^overrun: (\d+)", stats.read_text(), re.M)
        total += int(m[1]) if m else 0
    return total


class TraceFormatError(RuntimeError):
    """A tracepoint printed lines its parser does not match: a kernel whose print format changed.
    Raised instead of reading the run as one without events."""


def check_all_parsed(text: bytes | str, event: str, matched: int, pattern: re.Pattern | None = None) -> None:
    """Fails unless every line of `event` in `text` was among the `matched` ones; the error shows the
    first line that `pattern` (the parser's) does not match, or the first line of the event."""
    tag = f": {event}: "
    raw = text if isinstance(text, bytes) else text.encode()
    seen = raw.count(tag.encode())
    if matched == seen:
        return
    lines = [ln for ln in raw.splitlines() if tag.encode() in ln]
    bad = next(
        (ln for ln in lines if pattern is None or not pattern.search(ln if isinstance(text, bytes) else ln.decode())),
        lines[0],
    )
    raise TraceFormatError(
        f"{event}: {seen - matched} of {seen} trace lines do not have the format the parser knows "
        f"(kernel {os.uname().release}); the first: {bad.decode(errors='replace')[:300]!r}"
    )
