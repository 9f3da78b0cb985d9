"""The `bufsize course` subcommand: the class assignment's starter script and its checker."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bufsize.course import check, starter
from bufsize.scaffold.resultdir import check_out_dir
from bufsize.topologies.errors import UsageError
from bufsize.topologies.safefiles import make_dirs, write_atomic


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    c = sub.add_parser("course", help="the class assignment: copy its starter script, grade a student's results")
    what = c.add_subparsers(dest="course_cmd", required=True, parser_class=type(c))
    s = what.add_parser("starter", help="write the starter script (three gaps to fill) into DIR")
    s.add_argument("dir", type=given_path, help="directory for starter.py (created; an existing starter.py is kept)")
    s.set_defaults(func=run_starter)
    k = what.add_parser("check", help="grade DIR/answers.json against the model and the committed runs")
    k.add_argument(
        "dir", type=given_path, help="the --out directory of the student's starter run (or its answers.json)"
    )
    k.add_argument("--json", action="store_true", help="print the checks as JSON")
    k.set_defaults(func=run_check)
    return c


def given_path(text: str) -> Path:
    """A path as given; an empty one is refused (Path('') would be the current directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; give a directory")
    return Path(text)


def run_starter(a: argparse.Namespace) -> int:
    check_out_dir(a.dir)
    make_dirs(a.dir)
    dest = a.dir / "starter.py"
    if dest.exists() or dest.is_symlink():
        raise UsageError(f"{dest} exists: keeping it (remove it first for a fresh copy)")
    write_atomic(dest, Path(starter.__file__).read_text())
    print(f"wrote {dest}: fill in GAP 1-3, then run: sudo {sys.executable} {dest} --out {a.dir / 'results'}")
    return 0


def run_check(a: argparse.Namespace) -> int:
    checks = check.grade(check.load_answers(a.dir), check.committed_runs())
    print(check.as_json(checks) if a.json else check.report(checks))
    return 0 if all(c.passed for c in checks) else 1
