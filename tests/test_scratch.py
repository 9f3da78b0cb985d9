"""Where a run's scratch files go (ledger.scratch_root): tmpfs, never a disk, where there is one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bufsize.topologies import ledger
from bufsize.topologies.errors import MachineError

MOUNTS = """\
/dev/vda / ext4 rw,relatime 0 0
tmpfs /dev/shm tmpfs rw 0 0
/dev/vdb /run ext4 rw 0 0
tmpfs /run tmpfs rw 0 0
tmpfs /mnt/with\\040space tmpfs rw 0 0
/dev/vdc /mnt/with\\040space/disk xfs rw 0 0
"""


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/run/bufsize/run-abc123", "tmpfs"),  # the later of two mounts on /run is the one on top
        ("/runaway", "ext4"),  # a prefix of the name is not a parent directory
        ("/dev/shm/bufsize", "tmpfs"),
        ("/dev", "ext4"),
        ("/mnt/with space/x", "tmpfs"),  # \\040 in /proc/mounts is a space
        ("/mnt/with space/disk/y", "xfs"),  # the deepest mount holding the path
        ("/", "ext4"),
    ],
)
def test_fs_type_is_the_deepest_mount_holding_the_path(path: str, kind: str):
    assert ledger.fs_type(Path(path), MOUNTS) == kind


def test_fs_type_of_nothing_mounted_is_unknown():
    assert ledger.fs_type(Path("/x"), "") is None


@pytest.fixture
def fs_of(monkeypatch):
    """Pretend file systems: {path: type} for STATE_DIR and SHM_SCRATCH."""
    kinds: dict[Path, str | None] = {}
    monkeypatch.setattr(ledger, "fs_type", lambda p, mounts=None: kinds.get(Path(p)))
    ledger.scratch_root.cache_clear()
    yield kinds
    ledger.scratch_root.cache_clear()


@pytest.mark.parametrize(
    ("state_fs", "shm_fs", "want"),
    [
        ("tmpfs", "tmpfs", "state"),  # /run is tmpfs (most systems): everything stays there
        ("ext4", "tmpfs", "shm"),  # this machine: /run on the root ext4
        ("ext4", None, "state"),  # no tmpfs to go to
        ("ext4", "ext4", "state"),
    ],
)
def test_scratch_goes_to_tmpfs_when_state_dir_is_on_a_disk(fs_of, state_fs, shm_fs, want):
    fs_of[ledger.STATE_DIR], fs_of[ledger.SHM_SCRATCH] = state_fs, shm_fs
    assert ledger.scratch_root() == {"state": ledger.STATE_DIR, "shm": ledger.SHM_SCRATCH}[want]


def test_a_planted_scratch_root_is_refused(monkeypatch, tmp_path: Path, root):
    """/dev/shm is world-writable: a scratch root someone else made (or opened up) is not used."""
    root = tmp_path / "bufsize"
    monkeypatch.setattr(ledger, "scratch_root", lambda: root)
    assert ledger.make_scratch_root() == root and (os.stat(root).st_mode & 0o777) == 0o755
    os.chmod(root, 0o777)
    with pytest.raises(MachineError, match="writable by group or others"):
        ledger.make_scratch_root()
    root.rmdir()
    root.symlink_to(tmp_path)
    with pytest.raises(MachineError, match="not a directory"):
        ledger.make_scratch_root()


def test_a_run_keeps_its_scratch_under_the_scratch_root_and_teardown_removes_it(root):
    from bufsize.topologies.cleanup import teardown

    st = ledger.RunState.create()
    try:
        assert st.workdir.is_dir() and st.workdir.parent == ledger.scratch_root() and st.workdir_is_safe()
        (st.workdir / "delayline-stats.json").write_text("{}")
    finally:
        teardown(st)
    assert not st.workdir.exists() and not st.path.exists()
