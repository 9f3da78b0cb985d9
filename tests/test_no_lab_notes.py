"""Code and help say what the toolkit does and why, never when: no dates, no issue, stop or session
numbers. The dated record of how a value was found lives in docs/lab/, beside its result files."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from bufsize.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
LAB_NOTE = re.compile(r"20[0-9]{2}-[01][0-9]-[0-3][0-9]|\b(stop|issue|session) [0-9]+", re.IGNORECASE)
SOURCES = ("*.py", "*.c", "*.cc", "*.h")


def lab_notes_in(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if LAB_NOTE.search(line)]


def all_help(parser: argparse.ArgumentParser, prefix: str = "bufsize") -> dict[str, str]:
    """The --help text of a parser and of every subcommand below it, by command line."""
    out = {prefix: parser.format_help()}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out |= all_help(sub, f"{prefix} {name}")
    return out


def test_the_pattern_finds_a_date_and_an_issue_number_and_spares_plain_numbers():
    assert lab_notes_in("x = 1  # as before 2026-11-29\ny = 2  # see issue 30\nz = 3  # 30 issues of a queue")
    assert len(lab_notes_in("# Stop 44\n# stops at 44 packets\n# session 3\n# 2026 flows")) == 2


def test_no_lab_notes_in_the_code():
    found = [
        f"{p.relative_to(REPO)}: {line}"
        for folder in ("buffersizing", "topologies", "monitors")
        for pattern in SOURCES
        for p in sorted((REPO / folder).rglob(pattern))
        for line in lab_notes_in(p.read_text(errors="replace"))
    ]
    found += [f"binary_search.py: {line}" for line in lab_notes_in((REPO / "binary_search.py").read_text())]
    assert not found, "\n".join(found)


def test_no_lab_notes_in_any_help():
    helps = all_help(build_parser())
    assert len(helps) > 20  # every command and its subcommands were reached
    found = [f"{cmd}: {line}" for cmd, text in helps.items() for line in lab_notes_in(text)]
    assert not found, "\n".join(found)
