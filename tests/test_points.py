"""The point runner both sweeps use (longlived/points.py): finished points skipped, a failure recorded
and the rest run, in this process or as tasks on Dask workers, and a stopped sweep leaving no
worker behind."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from bufsize.longlived.points import Sweep, error_of, finished, point_dir, run_points
from bufsize.scaffold.cluster import Where


def answer(n: int, r: int, d: Path, packets: int = 7) -> None:
    (d / "result.json").write_text(json.dumps({"flows": n, "run": r, "buffer_packets": packets, "valid": True}))


def test_in_process_skips_finished_records_a_failure_and_goes_on(tmp_path):
    points = [(2, 1), (4, 1), (8, 1)]
    d = point_dir(tmp_path, 2, 1)
    d.mkdir()
    answer(2, 1, d, 99)  # finished before: not run again
    ran: list[tuple[int, int]] = []

    def task(n: int, r: int, d: Path) -> None:
        ran.append((n, r))
        if n == 4:
            raise RuntimeError("the link went away")
        answer(n, r, d)

    lines: list[str] = []
    res = run_points(Sweep(tmp_path, points, 1, estimate=lambda n: 10.0 * n), task, lines.append)
    assert ran == [(4, 1), (8, 1)]
    assert res == {"points": 3, "finished": 2, "failed": ["N=4 run 1: the link went away"]}
    assert error_of(point_dir(tmp_path, 4, 1)) == "RuntimeError: the link went away"
    assert json.loads((d / "result.json").read_text())["buffer_packets"] == 99
    assert lines[0].startswith("resuming") and "1 of 3 points already finished" in lines[0]
    assert any("point 2/3: N=4 run 1/1" in s and "ETA" in s for s in lines), lines
    assert any("point N=8 run 1: 7 packets" in s for s in lines), lines
    assert lines[-1].endswith(f"2/3 points finished in 0:00; results in {tmp_path}/")


def test_workers_run_jobs_at_once_and_a_failed_point_is_said(tmp_path):
    points = [(n, s) for s in (1, 2) for n in (10, 20)]

    def task(n: int, s: int, d: Path) -> None:
        started = time.time()
        time.sleep(1.0)
        (d / "ran").write_text(json.dumps({"pid": os.getpid(), "start": started, "end": time.time()}))
        if (n, s) == (20, 2):
            raise ValueError("no such simulator")
        answer(n, s, d)

    lines: list[str] = []
    res = run_points(Sweep(tmp_path, points, 2, run_name="seed"), task, lines.append, Where("local", 4))
    assert res["finished"] == 3 and res["failed"] == ["N=20 seed 2: ValueError: no such simulator"]
    ran = [json.loads((point_dir(tmp_path, n, s) / "ran").read_text()) for n, s in points]
    assert len({r["pid"] for r in ran}) == 4 and os.getpid() not in {r["pid"] for r in ran}  # a worker each
    assert max(r["start"] for r in ran) < min(r["end"] for r in ran), "four points, four at a time"
    assert all(finished(tmp_path, n, s) for n, s in points if (n, s) != (20, 2))
    assert error_of(point_dir(tmp_path, 20, 2)) == "ValueError: no such simulator"
    assert any("point N=20 seed 2 failed: ValueError: no such simulator" in s for s in lines), lines
    assert any("live page: http://127.0.0.1:" in s for s in lines), lines  # the dashboard, on loopback


def test_a_stopped_sweep_ends_its_workers(tmp_path):
    """An exception in the sweep (a signal's; here raised by a progress line) closes the cluster,
    which ends its workers and the point running there, unfinished."""
    pid_file = tmp_path / "pids"

    def task(n: int, r: int, d: Path) -> None:
        if n == 2:
            deadline = time.monotonic() + 20
            while not pid_file.exists() and time.monotonic() < deadline:
                time.sleep(0.05)  # N=4 is running on the other worker
            answer(n, r, d)
            return
        with pid_file.open("a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(60)

    def say(line: str) -> None:
        if "point 3/3" in line:  # N=2 is done, N=4 still running
            raise KeyboardInterrupt

    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_points(Sweep(tmp_path, [(2, 1), (4, 1), (8, 1)], 1), task, say, Where("local", 2))
    assert time.monotonic() - t0 < 40
    (pid,) = [int(p) for p in pid_file.read_text().split()]
    assert not Path(f"/proc/{pid}").exists(), "the running point's worker was left behind"
    assert finished(tmp_path, 2, 1) and not finished(tmp_path, 4, 1)


def test_on_a_terminal_one_bar_with_the_eta_and_the_probe_beneath_it(tmp_path):
    """A live Display draws the bar in place (tqdm) with the point and ETA, puts a probe's line on the
    status line beneath it instead of scrolling, and prints a finished point above the bar; the same
    events on a stream that is not a terminal are plain lines, with no control characters."""
    import io

    from bufsize.scaffold.display import Display

    def task(n: int, r: int, d: Path) -> None:
        say(f"  probe  1: {10 * n} packets -> median 99.20% pass [3 samples]")
        answer(n, r, d)

    live = io.StringIO()
    say = Display(live, live=True)
    res = run_points(Sweep(tmp_path / "live", [(2, 1), (4, 1)], 1, estimate=lambda n: 10.0 * n), task, say)
    assert res["finished"] == 2
    screen = live.getvalue()
    assert "\r" in screen and "point 2/2: N=4 run 1/1" in screen and "ETA" in screen, screen
    assert "probe  1: 40 packets -> median 99.20% pass" in screen
    assert "  point N=2 run 1: 7 packets" in screen and "2/2 points finished" in screen

    plain = io.StringIO()
    say = Display(plain)  # StringIO is not a terminal
    run_points(Sweep(tmp_path / "plain", [(2, 1), (4, 1)], 1, estimate=lambda n: 10.0 * n), task, say)
    lines = plain.getvalue().splitlines()
    assert "\r" not in plain.getvalue() and "\x1b" not in plain.getvalue()
    assert any(s.startswith("[") and "point 1/2: N=2 run 1/1 | elapsed" in s and "ETA" in s for s in lines), lines
    assert "  probe  1: 20 packets -> median 99.20% pass [3 samples]" in lines
