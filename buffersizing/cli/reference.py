"""The command reference of the documentation site: every command's --help, as the parser prints it.

Generated from the parser when the site is built (docs/hooks/site.py), so it cannot drift from the
code; the help texts carry each command's example and exit statuses (cli/helptext.py).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator

# The width the pages are laid out at, whatever the terminal that builds the site.
WIDTH = 100


def commands(parser: argparse.ArgumentParser, prefix: str = "bufsize") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command and subcommand below the parser, depth first, with its full name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix} {name}", sub
                yield from commands(sub, f"{prefix} {name}")


def command_reference() -> str:
    from bufsize.cli import build_parser

    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH + 2)  # argparse wraps at the terminal's width less 2
    try:
        parser = build_parser()
        parts = [
            "# Every command's help",
            "",
            "Generated from the argument parser when this site is built, so it says what the installed",
            "`bufsize` says. The [overview](commands.md) explains the commands together; each command's",
            "`--help` prints the same text.",
            "",
        ]
        for name, sub in commands(parser):
            parts += [f"## {name}", "", "```text", sub.format_help().rstrip(), "```", ""]
        return "\n".join(parts)
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
