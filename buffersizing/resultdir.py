"""Where a run's results go: checked before anything is built, written atomically, never lost to a crash.

`--out` must be (or become) a real directory this process can write: not a file, not a symlink,
not under /proc or /sys. Every JSON is written to a temporary file, fsynced and renamed, so a
crash never leaves a truncated result that a later resume would take for a finished one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from topologies.errors import UsageError

PSEUDO_FILESYSTEMS = ("/proc", "/sys", "/dev")


def check_out_dir(given: str | Path, name: str = "--out") -> Path:
    """Make sure `given` is a writable directory (creating it); a one-line UsageError otherwise.

    Pass the string as typed: Path("") is ".", and an empty --out must not mean the current directory.
    """
    if not str(given).strip():
        raise UsageError(f"{name} '{given}': empty; give a directory")
    path = Path(given)
    resolved = path.resolve()
    if any(resolved == Path(p) or Path(p) in resolved.parents for p in PSEUDO_FILESYSTEMS):
        raise UsageError(f"{name} {path}: not a place for results (a kernel pseudo-filesystem)")
    if path.is_symlink() and not path.is_dir():
        raise UsageError(f"{name} {path}: a dangling symbolic link")
    if path.exists() and not path.is_dir():
        raise UsageError(f"{name} {path}: exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{name} {path}: cannot create it ({e.strerror})") from e
    probe = path / f".bsz-write-test-{os.getpid()}"
    try:
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UsageError(f"{name} {path}: not writable ({e.strerror})") from e
    return path


def write_json_atomic(path: Path, data: dict) -> None:
    """Temporary file, fsync, rename: readers see the old file or the whole new one."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with tmp.open("w") as f:
        f.write(json.dumps(data, indent=1) + "\n")
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def read_finished(path: Path) -> dict | None:
    """A result file that parses as a JSON object, else None (absent, truncated or foreign)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
