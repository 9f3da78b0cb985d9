"""`bufsize remote` trusts nothing a remote machine says (issue 32, item 5): archive size caps, a
tar bomb stopped at its cap, a doctor answer of the wrong shape in one line, remote text escaped."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import spec_of
from test_remote import SPEC_ARGS, make_job

from bufsize.remote import plan as remote_plan
from bufsize.remote import run as rm
from bufsize.remote.plan import BadPoint, parse_machine, printable, sha256_of, unpack_point


def test_printable_escapes_terminal_control_and_keeps_text() -> None:
    assert printable("ok \x1b[2J\rgone\n") == "ok \\x1b[2J\\x0dgone\\x0a"
    assert printable("N=2 run 1: étoile") == "N=2 run 1: étoile"
    assert printable("\u202eevil") == "\\u202eevil"  # right-to-left override


def bomb(path: Path, members: int, size: int) -> None:
    with tarfile.open(path, "w:gz") as tar:
        data = b"\0" * size
        for i in range(members):
            info = tarfile.TarInfo(f"n0002-run1/f{i}")
            info.size = size
            tar.addfile(info, io.BytesIO(data))


def test_an_archive_unpacking_past_the_caps_is_refused_before_anything_is_written(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(remote_plan, "MAX_POINT_UNPACKED_BYTES", 1 << 20)
    big = tmp_path / "big.tgz"
    bomb(big, 3, 600_000)  # 1.8 MB of zeros: a few KB compressed
    assert big.stat().st_size < 50_000
    with pytest.raises(BadPoint, match="more than"):
        unpack_point(big, (2, 1), tmp_path / "in")
    assert not (tmp_path / "in").exists()
    monkeypatch.setattr(remote_plan, "MAX_POINT_MEMBERS", 5)
    many = tmp_path / "many.tgz"
    bomb(many, 6, 1)
    with pytest.raises(BadPoint, match="more than 5 files"):
        unpack_point(many, (2, 1), tmp_path / "in2")


def test_sha256_is_streamed(tmp_path) -> None:
    f = tmp_path / "x"
    f.write_bytes(b"a" * (3 << 20))
    import hashlib

    assert sha256_of(f) == hashlib.sha256(f.read_bytes()).hexdigest()


def remote_answering(tmp_path: Path, stdout: str) -> rm.Remote:
    r = rm.Remote(parse_machine("root@10.0.0.1"), make_job(tmp_path, spec_of(*SPEC_ARGS)))
    r.sh = lambda *a, **k: SimpleNamespace(stdout=stdout, stderr="", exited=0)  # type: ignore[method-assign]
    return r


@pytest.mark.parametrize(
    "answer",
    ["[1, 2]", "3", '"text"', "null", '{"problems": 5}', '{"congestion_controls": "reno"}', '{"qdiscs": []}'],
)
def test_a_doctor_answer_of_the_wrong_shape_is_one_line(tmp_path, answer: str) -> None:
    with pytest.raises(rm.MachineCannotRun, match="not a doctor report") as e:
        remote_answering(tmp_path, answer).check_doctor()
    assert "\n" not in str(e.value)


def test_a_point_archive_over_the_cap_is_refused_unread(tmp_path, monkeypatch) -> None:
    from test_remote import Ended

    monkeypatch.setattr(rm, "MAX_POINT_ARCHIVE_BYTES", 1000)
    job = make_job(tmp_path, spec_of(*SPEC_ARGS))
    why = rm.deliver(job, Ended("finished", {"archive": b"\0" * 1001, "worker": "vm\x1b[2J"}), (2, 1))
    assert why == "not merged: its archive from vm\\x1b[2J is over 0 MB"
    assert sorted(p.name for p in job.out.iterdir()) == []  # nothing written, not even a transit directory
