"""A results directory other users can write cannot make a root run write elsewhere, and two runs
cannot share one (issue 32). Real runs: real namespaces, the line, TCP."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import BUFSIZE, bufsize

NOBODY = 65534
# A short real measurement: 1 flow, 10 Mb/s, 2 s, measured as soon as the buffer is set (the files are
# what is judged here, not the traffic).
MEASURE = ["measure", "--hosts", "1", "--flows", "1", "--rate-mbps", "10", "--rtt-ms", "20", "--buffer-packets", "20",
           "--duration", "2", "--reference-s", "0", "--fidelity-s", "1", "--warmup-s", "1",
           "--settle-s", "0"]  # fmt: skip


def planted(link: Path, target: Path) -> None:
    link.symlink_to(target)
    os.lchown(link, NOBODY, NOBODY)


def shared_dir(path: Path) -> Path:
    path.mkdir()
    path.chmod(0o777)  # a pre-created /tmp/results anyone may write
    return path


@pytest.mark.integration
def test_links_planted_under_every_name_a_run_writes_leave_the_victim_intact(no_leftovers, tmp_path: Path) -> None:
    clean = tmp_path / "clean"
    res = bufsize(*MEASURE, "--out", str(clean), timeout=180)
    assert res.returncode in (0, 3), res.stderr
    names = {p.name for p in clean.iterdir()} - {".bsz-lock"}
    assert {"result.json", "queue.csv", "rate.csv", "queue.png"} <= names, names

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    d = shared_dir(tmp_path / "shared")
    guesses = [".bsz-write-test", *(f".bsz-write-test-{p}" for p in range(os.getpid(), os.getpid() + 50))]
    guesses += [f".{n}.tmp{p}" for n in ("result.json", "error.json") for p in range(os.getpid(), os.getpid() + 50)]
    for name in sorted(names | {"error.json"}) + guesses:
        planted(d / name, victim)
    res = bufsize(*MEASURE, "--out", str(d), "--force", timeout=180)
    assert res.returncode in (0, 3), res.stderr
    assert victim.read_text() == "precious\n"
    for name in names:
        assert (d / name).is_file() and not (d / name).is_symlink(), name
    assert '"flows": 1' in (d / "result.json").read_text()


@pytest.mark.integration
def test_the_write_probe_and_the_lock_do_not_follow_links(root, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    d = shared_dir(tmp_path / "shared")
    planted(d / ".bsz-lock", victim)
    res = bufsize("search", "--flows", "2", "--out", str(d), timeout=60)
    assert res.returncode == 2 and "cannot lock it" in res.stderr, res.stderr
    assert victim.read_text() == "precious\n"
    sub = tmp_path / "sub"
    sub.mkdir()
    planted(d / "run", sub)  # --out through a link someone else made
    res = bufsize("search", "--flows", "2", "--out", str(d / "run"), timeout=60)
    assert res.returncode == 2 and "symbolic link" in res.stderr, res.stderr
    assert list(sub.iterdir()) == []


@pytest.mark.integration
def test_a_second_run_on_the_same_out_is_refused_with_the_pid_of_the_first(no_leftovers, tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = subprocess.Popen([BUFSIZE, *MEASURE, "--duration", "4", "--out", str(out)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        lock = out / ".bsz-lock"
        deadline = time.monotonic() + 60
        while not (lock.exists() and lock.read_text().strip() == str(first.pid)):
            assert first.poll() is None and time.monotonic() < deadline, "the first run never took its lock"
            time.sleep(0.1)
        second = bufsize(*MEASURE, "--out", str(out), "--force", timeout=60)
        assert second.returncode == 2, second.stderr
        assert f"another bufsize run is using it (PID {first.pid})" in second.stderr
        _, err = first.communicate(timeout=180)
        assert first.returncode in (0, 3), err
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGINT)
            first.communicate(timeout=120)
    # The lock went with the first process: the directory can be used again (a shorter run will do).
    again = bufsize(*MEASURE, "--duration", "1", "--fidelity-s", "0", "--out", str(out), "--force", timeout=180)
    assert again.returncode in (0, 3), again.stderr
