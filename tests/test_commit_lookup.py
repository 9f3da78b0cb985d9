"""The commit a result names is found without git (issue 32): a search must not lose its result for it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bufsize import manifest
from bufsize.manifest import REPO, head_from_files, project_commit


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
