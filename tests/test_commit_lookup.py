"""The commit a result names is found without git (issue 32): a search must not lose its result for it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bufsize.scaffold import manifest
from bufsize.scaffold.manifest import REPO, head_from_files, project_commit


def git_head(repo: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_without_git_on_path_the_commit_is_read_from_dot_git(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    want = git_head(REPO)
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing in it: no git
    got = project_commit()
    assert got.split()[0] == want
    assert "git not installed" in got


def make_repo(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "r"
    repo.mkdir()
    env = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "f").write_text("x")
    subprocess.run(["git", "-C", str(repo), "add", "f"], check=True)
    subprocess.run(["git", "-C", str(repo), *env, "commit", "-qm", "one"], check=True)
    return repo, git_head(repo)


def test_loose_packed_and_detached_heads(tmp_path: Path) -> None:
    repo, sha = make_repo(tmp_path)
    assert head_from_files(repo) == sha
    subprocess.run(["git", "-C", str(repo), "pack-refs", "--all"], check=True)
    assert not (repo / ".git/refs/heads/main").exists()
    assert head_from_files(repo) == sha
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "--detach"], check=True)
    assert head_from_files(repo) == sha


def test_garbage_heads_give_none_not_an_exception(tmp_path: Path) -> None:
    repo, _ = make_repo(tmp_path)
    (repo / ".git/HEAD").write_text("ref: ../../../etc/passwd\n")
    assert head_from_files(repo) is None
    (repo / ".git/HEAD").write_text("ref: refs/heads/nope\n")
    assert head_from_files(repo) is None
    assert head_from_files(tmp_path / "not-a-repo") is None


def test_a_shipped_copy_names_the_commit_it_was_shipped_as(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / ".bufsize-commit").write_text("a" * 40 + "\n")
    monkeypatch.setattr(manifest, "REPO", copy)
    monkeypatch.setattr(manifest, "SHIPPED_COMMIT", copy / ".bufsize-commit")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert project_commit() == "a" * 40


def test_a_git_that_does_not_answer_costs_the_dirty_flag_not_the_result(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """CI stop 44: in the VM guest `git status` ran past its 60 s and the measure lost its result."""
    repo, sha = make_repo(tmp_path)
    real_git = subprocess.run(["which", "git"], capture_output=True, text=True, check=True).stdout.strip()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "git"
    fake.write_text(f'#!/bin/sh\nfor a; do [ "$a" = status ] && exec sleep 30; done\nexec {real_git} "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setattr(manifest, "REPO", repo)
    monkeypatch.setattr(manifest, "GIT_TIMEOUT_S", 1.0)
    got = project_commit()
    assert got.split()[0] == sha
    assert "uncommitted changes not checked: git status took over 1 s" in got


def test_a_copied_read_only_checkout_is_judged_by_size_and_mtime(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The guest sees the checkout over read-only 9p: other inodes than the index names, and no index
    to refresh. Size and whole-second mtime decide, so git reads no file: a same-size edit with the
    mtime put back is not seen (the price), a size change is."""
    repo, sha = make_repo(tmp_path)
    day_ago = os.stat(repo / "f").st_mtime - 86400  # older than the index, so git trusts its stat
    os.utime(repo / "f", (day_ago, day_ago))
    subprocess.run(["git", "-C", str(repo), "update-index", "--refresh", "-q"], check=True)
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(repo), str(copy)], check=True)  # new inodes, ctimes; same mtimes
    mnt = tmp_path / "ro"
    mnt.mkdir()
    subprocess.run(["mount", "--bind", str(copy), str(mnt)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(mnt)], check=True)
        monkeypatch.setattr(manifest, "REPO", mnt)
        assert project_commit() == sha
        f = copy / "f"
        st = f.stat()
        f.write_text("y")  # same size
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert project_commit() == sha
        f.write_text("longer")
        assert project_commit() == sha + " (with uncommitted changes)"
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
