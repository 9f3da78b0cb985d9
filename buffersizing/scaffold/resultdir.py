"""Where a run's results go: checked before anything is built, written atomically, never lost to a crash.

`--out` must be (or become) a real directory this process can write: not a file, not a symlink,
not under /proc or /sys. Every JSON is written to a temporary file, fsynced and renamed, so a
crash never leaves a truncated result that a later resume would take for a finished one; nothing
is written through a link another user could have planted (topologies/safefiles.py).
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
from pathlib import Path

from bufsize.topologies.errors import UsageError
from bufsize.topologies.safefiles import UnsafePath, make_dirs, open_lock_file, read_bounded, write_atomic
from bufsize.topologies.units import digits

PSEUDO_FILESYSTEMS = ("/proc", "/sys", "/dev")
NAME_MAX = 255  # bytes per name and per path on Linux (limits.h)
PATH_MAX = 4096


def check_out_dir(given: str | Path, name: str = "--out", create: bool = True) -> Path:
    """Make sure `given` is a writable directory (creating it); a one-line UsageError otherwise.
    create=False (a --dry-run) checks only what can be checked without creating or locking anything.

    Pass the string as typed: Path("") is ".", and an empty --out must not mean the current directory.
    `--out` itself must not be a symbolic link (the links on the way to it may be the system's own:
    topologies/safefiles.py says which are followed).
    """
    if not str(given).strip():
        raise UsageError(f"{name} '{given}': empty; give a directory")
    path = Path(given)
    if any(len(part.encode()) > NAME_MAX for part in path.parts):
        raise UsageError(f"{name}: a name in it is longer than {NAME_MAX} bytes")
    if len(os.fsencode(os.path.abspath(path))) >= PATH_MAX:
        raise UsageError(f"{name}: the path is longer than {PATH_MAX - 1} bytes")
    resolved = path.resolve()
    if ".." in path.parts:
        # 'link/..' is where the kernel goes (the link's target's parent), not where a lexical walk
        # would: the directory checked, created, probed and locked is the one the kernel reaches.
        path = resolved
    if any(resolved == Path(p) or Path(p) in resolved.parents for p in PSEUDO_FILESYSTEMS):
        raise UsageError(f"{name} {path}: not a place for results (a kernel pseudo-filesystem)")
    if path.is_symlink():
        what = "a dangling symbolic link" if not path.exists() else f"a symbolic link; give {resolved} itself"
        raise UsageError(f"{name} {path}: {what}")
    if path.exists() and not path.is_dir():
        raise UsageError(f"{name} {path}: exists and is not a directory")
    if not create:
        return path
    try:
        make_dirs(path)
    except UnsafePath as e:
        raise UsageError(f"{name} {path}: {e.strerror}") from e
    except OSError as e:
        raise UsageError(f"{name} {path}: cannot create it ({e.strerror})") from e
    try:  # a new random name, never opened through a link (the old fixed probe name could be planted)
        write_atomic(path / ".bsz-write-test", "")
        (path / ".bsz-write-test").unlink()
    except OSError as e:
        raise UsageError(f"{name} {path}: not writable ({e.strerror})") from e
    lock_out_dir(path, name)
    return path


LOCK_NAME = ".bsz-lock"
_LOCKED: dict[tuple[int, int], int] = {}  # (device, inode) of each directory this process holds: its lock's fd


def lock_out_dir(path: Path, name: str = "--out") -> None:
    """Hold `path` for this process until it exits: a second run on the same directory (which would
    do a sweep's points twice and interleave their files) is refused with the PID of the first.
    flock, so the lock goes with the process however it ends; taken again by this process, a no-op."""
    st = os.stat(path)
    key = (st.st_dev, st.st_ino)
    if key in _LOCKED:
        return
    try:
        fd = open_lock_file(path / LOCK_NAME)
    except OSError as e:
        raise UsageError(f"{name} {path}: cannot lock it ({e.strerror})") from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").split()
        os.close(fd)
        who = f"PID {holder[0]}" if holder and digits(holder[0]) else "its PID not recorded"
        raise UsageError(
            f"{name} {path}: another bufsize run is using it ({who}); wait for it to end, or choose another directory"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _LOCKED[key] = fd


def write_json_atomic(path: Path, data: dict) -> None:
    """Temporary file, fsync, rename, never through a link: readers see the old file or the whole new one."""
    write_atomic(path, json.dumps(data, indent=1) + "\n")


def exit_status(result: dict) -> int:
    """A run's exit status: 1 when its result.json could not be written, else 0 when valid, 3 when
    flagged."""
    if any(f.startswith("result.json") for f in result.get("files_not_written") or []):
        return 1
    return 0 if result["valid"] else 3


def read_finished(path: Path) -> dict | None:
    """A result file that parses as a JSON object, else None (absent, truncated or foreign)."""
    try:
        data = json.loads(read_bounded(path))
    except (OSError, ValueError, RecursionError):  # UnsafePath is an OSError; a 5,000-digit int a ValueError
        return None
    return data if isinstance(data, dict) else None


def table_rows(out: Path | None) -> list[dict[str, str]]:
    """The rows of `out`/table.csv (what --json prints after a command that writes a table); none
    if it was not written. Read whole and closed at once."""
    if out is None:
        return []
    try:
        text = read_bounded(out / "table.csv")
    except FileNotFoundError:
        return []
    return list(csv.DictReader(io.StringIO(text)))
