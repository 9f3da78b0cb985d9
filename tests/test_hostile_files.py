"""Faults a user (or someone sharing the machine) can plant in paths and files, each reproduced:
a hard link where the toolkit writes, Unicode digits where it parses numbers, a FIFO, a device or a
huge number where it reads JSON, an empty path, and a remote directory spelled with a leading '//'.
Each is refused in one line, with no traceback and no hang, and nothing is written through it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import BUFSIZE

from bufsize.remote.run import check_remote_dir
from bufsize.scaffold.resultdir import lock_out_dir, read_finished
from bufsize.topologies.errors import UsageError
from bufsize.topologies.safefiles import UnsafePath, open_lock_file, open_new, read_bounded
from bufsize.topologies.units import digits


def bufsize(*argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([BUFSIZE, *argv], capture_output=True, text=True, timeout=timeout)


def refused_cleanly(res: subprocess.CompletedProcess) -> None:
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def planted_hard_link(tmp_path: Path, name: str) -> tuple[Path, Path]:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    d = tmp_path / "out"
    d.mkdir()
    os.link(victim, d / name)
    return d, victim


def test_a_hard_link_at_the_lock_is_refused_and_not_written_through(tmp_path):
    d, victim = planted_hard_link(tmp_path, ".bsz-lock")
    with pytest.raises(UsageError, match="hard link"):
        lock_out_dir(d)
    with pytest.raises(UnsafePath):
        open_lock_file(d / ".bsz-lock")
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("append", [False, True])
def test_a_hard_link_at_a_log_is_refused_and_not_written_through(tmp_path, append):
    d, victim = planted_hard_link(tmp_path, "search.log")
    with pytest.raises(UnsafePath, match="hard link"):
        open_new(d / "search.log", append=append)
    assert victim.read_text() == "precious\n"
    with open_new(d / "other.log") as f:  # a file of one name is written as before
        f.write("x")
    assert (d / "other.log").read_text() == "x"


def test_only_ascii_digits_are_digits():
    assert digits("123") and not digits("¹") and not digits("١٢") and not digits("") and not digits("-1")


@pytest.mark.parametrize(
    "argv",
    [
        ["sweep", "--out", "never", "--flows", "2", "--points", "2:¹", "--dry-run"],
        ["sim", "search", "--start-buffer", "¹", "--print-config"],
        ["remote", "--dry-run", "--machine", "host:¹", "--flows", "2", "--out", "never", "--commit", "HEAD"],
        ["course", "starter", ""],
        ["course", "check", ""],
    ],
    ids=["sweep-points", "sim-start-buffer", "remote-port", "starter-empty", "check-empty"],
)
def test_unicode_digits_and_empty_paths_are_refused_in_one_line(argv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    refused_cleanly(bufsize(*argv))
    assert list(tmp_path.iterdir()) == []  # nothing written into the current directory


@pytest.mark.parametrize(
    "content",
    [
        '{"config": {}, "points": [{"flows": ' + "9" * 400 + ', "found_packets": 3}]}',
        '{"config": {}, "points": [{"flows": ' + "9" * 5000 + "}]}",
        "[" * 100_000,
    ],
    ids=["400-digit", "5000-digit", "deep"],
)
def test_course_check_refuses_numbers_no_starter_writes(tmp_path, content):
    (tmp_path / "answers.json").write_text(content)
    refused_cleanly(bufsize("course", "check", str(tmp_path)))


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "huge"])
def test_files_read_back_must_be_regular_and_bounded(tmp_path, kind):
    f = tmp_path / "answers.json"
    if kind == "fifo":
        os.mkfifo(f)
    elif kind == "dev-zero":
        f.symlink_to("/dev/zero")
    else:
        with f.open("wb") as out:
            out.truncate((16 << 20) + 1)
    with pytest.raises(UnsafePath):
        read_bounded(f)
    assert read_finished(f) is None  # a result file: unreadable reads as not finished, never a hang
    refused_cleanly(bufsize("course", "check", str(tmp_path), timeout=20))


def test_a_result_written_by_the_toolkit_reads_back(tmp_path):
    (tmp_path / "result.json").write_text(json.dumps({"kind": "search", "buffer_packets": 12}))
    assert read_finished(tmp_path / "result.json") == {"kind": "search", "buffer_packets": 12}


@pytest.mark.parametrize("given", ["//", "//proc/bsz", "//{machine}", "///sys/x"])
def test_a_remote_dir_with_a_leading_double_slash_is_checked_as_what_it_is(given):
    with pytest.raises(UsageError, match="--remote-dir"):
        check_remote_dir(given)


def test_a_remote_dir_of_its_own_passes():
    assert check_remote_dir("//var/lib/bsz//x") == "/var/lib/bsz/x"


@pytest.mark.integration
def test_a_write_that_fails_after_the_measurement_costs_that_file_not_the_result(no_leftovers, tmp_path):
    """A directory planted where the queue's CSV goes: the run measures, saves result.json first,
    says in one line what it could not write, and lists it in the result."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "queue.csv").mkdir()
    res = subprocess.run(
        [BUFSIZE, "measure", "--hosts", "1", "--flows", "1", "--rate-mbps", "10", "--rtt-ms", "20",
         "--buffer-packets", "20", "--duration", "2", "--warmup-s", "1", "--settle-s", "0", "--reference-s", "0",
         "--fidelity-s", "0", "--out", str(out)],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert res.returncode in (0, 3), res.stderr[-2000:]
    result = json.loads((out / "result.json").read_text())
    assert result["kind"] == "measure" and result["utilization"] > 0
    assert len(result["files_not_written"]) == 1 and "queue.csv" in result["files_not_written"][0]
    assert "result.json written; the monitors' data not" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("content", ["[]", '{"spec": [1]}', "[" * 100_000, ""])
def test_a_series_file_that_is_not_one_is_refused(tmp_path, content):
    from bufsize.shortflows.loss import LossSpec
    from bufsize.shortflows.series import EmulatedPoints, open_series

    (tmp_path / "series.json").write_text(content)
    with pytest.raises(UsageError, match="not a series file"):
        open_series(tmp_path, LossSpec(), EmulatedPoints("delayline"))


def test_a_twin_sweep_manifest_nested_too_deep_is_refused(tmp_path):
    from bufsize.longlived.sweep import open_sweep
    from bufsize.scaffold.cluster import Where
    from bufsize.sim.sweep import SimSweepSpec, twin_runner

    (tmp_path / "manifest.json").write_text("[" * 100_000)
    spec = SimSweepSpec([10], 1, 400, 10.0, "20", "reno", 1000.0)
    with pytest.raises(UsageError, match="not a sweep manifest"):
        open_sweep(tmp_path, spec, twin_runner(spec, Where()))


def test_plot_refuses_a_csv_field_past_the_csv_limit(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "result.json").write_text(json.dumps({"kind": "measure", "flows": 1}))
    (run / "queue.csv").write_text("t,qlen\n" + "1" * 200_000 + ",1\n")
    refused_cleanly(bufsize("plot", str(run)))


def test_an_out_through_a_link_and_dotdot_is_the_directory_the_kernel_reaches(tmp_path):
    from bufsize.scaffold.resultdir import check_out_dir

    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "lnk").symlink_to(tmp_path / "real" / "sub")
    got = check_out_dir(str(tmp_path / "lnk" / ".." / "new"))
    assert got == tmp_path / "real" / "new" and got.is_dir()
    assert not (tmp_path / "new").exists()  # the lexical reading was not created
    assert sorted(p.name for p in got.iterdir()) == [".bsz-lock"]  # the write probe removed


def test_an_out_through_a_link_into_proc_is_refused_and_leaves_nothing(tmp_path):
    from bufsize.scaffold.resultdir import check_out_dir

    (tmp_path / "p").symlink_to("/proc/self")
    with pytest.raises(UsageError, match="pseudo-filesystem"):
        check_out_dir(str(tmp_path / "p" / ".." / "bsz-out"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]
