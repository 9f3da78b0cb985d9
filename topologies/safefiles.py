"""Files written as root in directories other users may write: never through a symbolic link.

Every directory on the way to a file is opened one component at a time with O_NOFOLLOW, relative
to the one before it. A symbolic link on the way is followed only when nobody but root could have
put it there or could swap it: it is owned by root (or by us) and so is its directory, which is not
group- or world-writable unless it is sticky. So `--out` may sit behind the system's own links
(/var/run -> /run), while a link planted in a results directory (`queue.csv -> /etc/shadow`, a run
directory replaced by a link) makes the write fail instead of landing elsewhere.

Files are written atomically: a new temporary name (O_CREAT | O_EXCL | O_NOFOLLOW, so an existing
name or link is never opened), fsync, rename over the final name (rename replaces a link itself,
never its target). Readers see the old file or the whole new one.
"""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

MAX_LINKS = 40  # as the kernel's own limit on links followed in one lookup (ELOOP)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class UnsafePath(OSError):
    """A path the toolkit will not write through (a planted link, a loop)."""


def _trusted_link(dir_fd: int, name: str) -> bool:
    """A link nobody but root (or we) could have made or swapped in that directory."""
    me = {0, os.geteuid()}
    link = os.lstat(name, dir_fd=dir_fd)
    parent = os.fstat(dir_fd)
    if link.st_uid not in me or parent.st_uid not in me:
        return False
    writable_by_others = parent.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    return not writable_by_others or bool(parent.st_mode & stat.S_ISVTX)


def open_dir(path: str | os.PathLike[str], create: bool = False, mode: int = 0o755) -> int:
    """A descriptor of directory `path`, reached without following an untrusted link.

    create: make missing directories on the way (as `mkdir -p`). The caller closes the descriptor.
    """
    todo = list(Path(os.path.abspath(path)).parts[1:])
    stack = [os.open("/", _DIR_FLAGS)]  # '..' from a link's target pops back to the parent
    links = 0
    try:
        while todo:
            name = todo.pop(0)
            if name in ("", "."):
                continue
            if name == "..":
                if len(stack) > 1:
                    os.close(stack.pop())
                continue
            here = stack[-1]
            try:
                stack.append(os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=here))
                continue
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):  # made meanwhile by someone else: reopen
                    os.mkdir(name, mode, dir_fd=here)
                todo.insert(0, name)
                continue
            except OSError as e:
                if not (stat.S_ISLNK(os.lstat(name, dir_fd=here).st_mode)):
                    raise
                if not _trusted_link(here, name):
                    raise UnsafePath(e.errno, f"not following a link another user could have made: {name}") from e
            links += 1
            if links > MAX_LINKS:
                raise UnsafePath(40, f"too many links on the way to {path}")
            target = os.readlink(name, dir_fd=here)
            if os.path.isabs(target):
                for fd in stack[1:]:
                    os.close(fd)
                del stack[1:]
            todo[:0] = list(Path(target).parts[1:] if os.path.isabs(target) else Path(target).parts)
        fd = stack.pop()
        return fd
    finally:
        for fd in stack:
            os.close(fd)


def make_dirs(path: str | os.PathLike[str]) -> None:
    """`mkdir -p` that never follows an untrusted link."""
    os.close(open_dir(path, create=True))


def write_atomic(path: str | os.PathLike[str], data: str | bytes, mode: int = 0o644) -> None:
    """Write `data` to `path` through a new temporary file, fsync and rename; its directory must exist."""
    p = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    dir_fd = open_dir(p.parent)
    try:
        tmp = _create_temp(dir_fd, p.name, mode)
        try:
            with os.fdopen(tmp[1], "wb") as f:
                f.write(raw)
                f.flush()
                os.fsync(f.fileno())
            os.rename(tmp[0], p.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp[0], dir_fd=dir_fd)
            raise
    finally:
        os.close(dir_fd)


def _create_temp(dir_fd: int, name: str, mode: int) -> tuple[str, int]:
    # A fresh random name each try: a planted file or link of any name is never opened.
    for _ in range(100):
        tmp = f".{name[:200]}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            return tmp, os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd
            )
        except FileExistsError:
            continue
    raise UnsafePath(17, f"no free temporary name beside {name}")


def check_own_file(fd: int, path: str | os.PathLike[str]) -> None:
    """Refuse, on the open descriptor, what O_NOFOLLOW lets through: a FIFO or device, and a hard link
    to a file elsewhere (more than one name), which writing would change under its other name."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePath(21, f"{path}: not a regular file")
    if st.st_nlink > 1:
        raise UnsafePath(31, f"{path}: a hard link to another file ({st.st_nlink} names); remove it")


def open_new(path: str | os.PathLike[str], append: bool = False) -> IO[Any]:
    """A file opened for writing as it goes (a log, a record stream), not through a link.

    The name itself is opened with O_NOFOLLOW: a link there makes this fail. Without `append` the
    file is truncated (only a regular file of one name: a FIFO, device or hard link planted there is
    refused, before anything is written).
    """
    p = Path(path)
    dir_fd = open_dir(p.parent)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        flags |= os.O_APPEND if append else 0
        fd = os.open(p.name, flags, 0o644, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    try:
        check_own_file(fd, path)
        os.set_blocking(fd, True)
        if not append:
            os.ftruncate(fd, 0)
        return os.fdopen(fd, "a" if append else "w", newline="")
    except BaseException:
        os.close(fd)
        raise


# The most the toolkit reads of a file it wrote (a result, a manifest, a table, a student's answers):
# the largest committed result is under 100 KB; a file past this is not one of ours.
READ_LIMIT_BYTES = 16 << 20


def read_bounded(path: str | os.PathLike[str], limit: int = READ_LIMIT_BYTES) -> str:
    """The text of a regular file of at most `limit` bytes. A FIFO (which would block for ever), a
    device such as /dev/zero (which never ends) or a file past the limit is refused (UnsafePath), and
    the open never waits on the other end of a FIFO."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePath(21, f"{path}: not a regular file")
        if st.st_size > limit:
            raise UnsafePath(27, f"{path}: {st.st_size} bytes, more than the {limit} a file of this toolkit holds")
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # grew while read
        raise UnsafePath(27, f"{path}: more than {limit} bytes")
    return data.decode()


def open_lock_file(path: str | os.PathLike[str]) -> int:
    """A descriptor (read-write, not truncated) of a regular file at `path`, created if missing,
    never opened through a link, symbolic or hard; for flock."""
    p = Path(path)
    dir_fd = open_dir(p.parent)
    try:
        fd = os.open(
            p.name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644, dir_fd=dir_fd
        )
    finally:
        os.close(dir_fd)
    try:
        check_own_file(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def atomic_text(path: str | os.PathLike[str]) -> Iterator[io.StringIO]:
    """`with atomic_text(p) as f: csv.writer(f)...`: the text lands at `p` atomically on success."""
    buf = io.StringIO(newline="")
    yield buf
    write_atomic(path, buf.getvalue())


def save_figure(fig: Any, path: str | os.PathLike[str], **kwargs: Any) -> None:
    """matplotlib's savefig, written atomically and not through a link (the format from the suffix)."""
    buf = io.BytesIO()
    fig.savefig(buf, format=Path(path).suffix.lstrip(".") or "png", **kwargs)
    write_atomic(path, buf.getvalue())
