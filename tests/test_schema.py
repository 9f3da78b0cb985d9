"""The versioned schema of results: the committed results follow it, `bufsize validate` names what
is off, and documents the toolkit writes are checked as they are written (conftest sets that)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import BUFSIZE

from bufsize.scaffold import schema
from bufsize.scaffold.resultdir import write_json_atomic

REPO = Path(__file__).resolve().parents[1]


def committed() -> list[Path]:
    argv = ["git", "ls-files", "*result.json", "*manifest.json"]
    out = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    return [REPO / p for p in out.stdout.split() if not p.startswith("tests/")]


def validate(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([BUFSIZE, "validate", *map(str, args)], capture_output=True, text=True, timeout=300)


def test_every_committed_result_and_manifest_follows_the_schema():
    files = committed()
    assert len(files) > 700  # the committed sweeps are all there
    found = [line for f in files for line in schema.check_file(f)]
    assert not found, "\n".join(found[:20])


def test_validate_passes_a_committed_sweep_and_names_the_key_removed_from_a_copy(tmp_path: Path):
    sweep = REPO / "results" / "full" / "2026-11-27"
    ok = validate(sweep)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "all valid" in ok.stderr and ok.stdout == ""
    copy = tmp_path / "sweep"
    shutil.copytree(sweep, copy, ignore=shutil.ignore_patterns("*.png", "*.pdf", "*.csv"))
    point = copy / "n0010-run1" / "result.json"
    doc = json.loads(point.read_text())
    del doc["buffer_packets"]
    write_json_atomic(point, doc)
    manifest = copy / "manifest.json"
    m = json.loads(manifest.read_text())
    m["spec"]["flows"] = "10,50"
    write_json_atomic(manifest, m)
    bad = validate(copy)
    assert bad.returncode == 1
    lines = bad.stdout.splitlines()
    assert f"{point}: (top): 'buffer_packets' is a required property" in lines
    assert any(line.startswith(f"{manifest}: spec/flows: ") for line in lines), lines
    assert len(lines) == 2, lines


def test_validate_refuses_what_is_not_a_result_without_reading_it_whole_or_hanging(tmp_path: Path):
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / "result.json")
    (tmp_path / "link").mkdir()
    (tmp_path / "link" / "result.json").symlink_to("/dev/zero")
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "result.json").write_text("[" * 100_000 + "]" * 100_000)
    r = validate(tmp_path)
    assert r.returncode == 1
    assert "fifo/result.json: (file): not a regular file" in r.stdout
    assert "link/result.json: (file):" in r.stdout  # O_NOFOLLOW: a link is refused, /dev/zero never read
    assert "deep/result.json: (file): nested too deeply" in r.stdout


def test_validate_exit_codes_for_bad_arguments_and_nothing_to_check(tmp_path: Path):
    assert validate(tmp_path / "absent").returncode == 2
    assert validate("").returncode == 2
    empty = validate(tmp_path)
    assert empty.returncode == 1 and "no result.json" in empty.stderr


def test_migrate_stamps_only_the_version_and_a_legacy_kind(tmp_path: Path):
    good = json.loads((REPO / "results" / "full" / "2026-11-27" / "n0010-run1" / "result.json").read_text())
    legacy = {k: v for k, v in good.items() if k not in ("schema_version", "kind")}
    d = tmp_path / "old"
    d.mkdir()
    write_json_atomic(d / "result.json", legacy)
    assert schema.migrate_file(d / "result.json")
    doc = json.loads((d / "result.json").read_text())
    assert doc == {"schema_version": 1, "kind": "search", **legacy}
    assert list(doc)[:2] == ["schema_version", "kind"]
    assert not schema.migrate_file(d / "result.json")  # stamped once


def test_a_writer_that_strays_from_the_schema_fails_under_the_tests_check():
    assert os.environ.get(schema.CHECK_ON_WRITE) == "1"
    good = json.loads((REPO / "results" / "full" / "2026-11-27" / "n0010-run1" / "result.json").read_text())
    with pytest.raises(schema.SchemaMismatch, match="valid: 'yes' is not of type 'boolean'"):
        schema.stamp(good | {"valid": "yes"}, "result")
    assert schema.stamp(good, "result")["schema_version"] == schema.SCHEMA_VERSION
