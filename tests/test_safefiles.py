"""Writes as root never go through a link someone else could plant (issue 32)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bufsize.topologies import safefiles
from bufsize.topologies.safefiles import UnsafePath, atomic_text, make_dirs, open_dir, open_new, write_atomic

NOBODY = 65534


def planted(link: Path, target: Path) -> None:
    """A link as another user would leave it (owned by nobody)."""
    link.symlink_to(target)
    os.lchown(link, NOBODY, NOBODY)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    v = tmp_path / "victim"
    v.write_text("precious\n")
    return v


@pytest.fixture
def shared(tmp_path: Path, root: None) -> Path:  # root: links are planted as another user (lchown)
    """A results directory anyone may write, as a pre-created /tmp/results would be."""
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o777)
    return d


def test_atomic_write_replaces_a_planted_link_not_its_target(shared: Path, victim: Path) -> None:
    planted(shared / "queue.csv", victim)
    write_atomic(shared / "queue.csv", "t,bytes\n")
    assert victim.read_text() == "precious\n"
    assert not (shared / "queue.csv").is_symlink()
    assert (shared / "queue.csv").read_text() == "t,bytes\n"


def test_no_temporary_file_is_left_and_nothing_opened_by_a_guessable_name(shared: Path, victim: Path) -> None:
    # Links named like the old temporary names (".result.json.tmpPID") are never opened.
    for guess in (f".result.json.tmp{os.getpid()}", f".result.json.{os.getpid()}.tmp"):
        planted(shared / guess, victim)
    write_atomic(shared / "result.json", "{}\n")
    assert victim.read_text() == "precious\n"
    assert sorted(p.name for p in shared.iterdir() if not p.is_symlink()) == ["result.json"]


def test_a_run_directory_swapped_for_a_link_is_refused(shared: Path, tmp_path: Path, victim: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    planted(shared / "n0002-run1", elsewhere)
    with pytest.raises(UnsafePath):
        write_atomic(shared / "n0002-run1" / "result.json", "{}")
    with pytest.raises(UnsafePath):
        make_dirs(shared / "n0002-run1" / "deeper")
    assert list(elsewhere.iterdir()) == []


def test_roots_own_links_are_followed(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "alias").symlink_to("real")  # ours, in a directory only we can write
    write_atomic(tmp_path / "alias" / "x.json", "1")
    assert (real / "x.json").read_text() == "1"
    (tmp_path / "abs").symlink_to(real)  # an absolute target, and '..' inside the path
    write_atomic(tmp_path / "abs" / ".." / "real" / "y", b"2")
    assert (real / "y").read_bytes() == b"2"


def test_our_link_in_a_world_writable_directory_without_sticky_bit_is_not_followed(
    shared: Path, tmp_path: Path
) -> None:
    (shared / "alias").symlink_to(tmp_path)  # ours, but anyone could have swapped it
    with pytest.raises(UnsafePath):
        open_dir(shared / "alias")


def test_a_link_loop_is_refused_not_followed_forever(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(UnsafePath, match="too many links"):
        open_dir(tmp_path / "a")


def test_streams_refuse_links_and_non_files(shared: Path, victim: Path) -> None:
    planted(shared / "stderr.txt", victim)
    with pytest.raises(OSError):
        open_new(shared / "stderr.txt")
    os.mkfifo(shared / "records.csv")  # a writer would block on it forever, or feed a reader
    with pytest.raises(OSError):
        open_new(shared / "records.csv")
    (shared / "dev").symlink_to("/dev/null")
    os.mknod(shared / "null", 0o666 | 0o020000, os.makedev(1, 3))
    with pytest.raises(UnsafePath, match="not a regular file"):
        open_new(shared / "null")
    with open_new(shared / "log.txt", append=True) as f:
        f.write("a\n")
    with open_new(shared / "log.txt", append=True) as f:
        f.write("b\n")
    assert (shared / "log.txt").read_text() == "a\nb\n"
    assert victim.read_text() == "precious\n"


def test_make_dirs_creates_the_missing_chain(tmp_path: Path) -> None:
    make_dirs(tmp_path / "x" / "y" / "z")
    assert (tmp_path / "x" / "y" / "z").is_dir()
    make_dirs(tmp_path / "x" / "y" / "z")  # again: nothing to do
    (tmp_path / "f").write_text("")
    with pytest.raises(NotADirectoryError):
        make_dirs(tmp_path / "f" / "sub")


def test_atomic_text_writes_on_success_only(tmp_path: Path) -> None:
    with atomic_text(tmp_path / "t.csv") as f:
        f.write("a,b\n")
    assert (tmp_path / "t.csv").read_text() == "a,b\n"
    with pytest.raises(RuntimeError), atomic_text(tmp_path / "u.csv") as f:
        f.write("half")
        raise RuntimeError("boom")
    assert not (tmp_path / "u.csv").exists()


def test_a_failed_write_leaves_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*a: object, **k: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safefiles.os, "fsync", refuse)
    with pytest.raises(OSError, match="No space"):
        write_atomic(tmp_path / "r.json", "{}")
    assert list(tmp_path.iterdir()) == []
