"""What every command's --help ends with: one example and the exit statuses it can return.

Kept in one table so that each command has exactly one example, and the exit statuses are said the
same way everywhere (tests/test_help.py runs every example's parse and checks each help page).
"""

from __future__ import annotations

import argparse
import textwrap

# One example per command, as a user would type it.
EXAMPLES = {
    "doctor": "bufsize doctor",
    "verify": "bufsize verify --hosts 2 --rate-mbps 62.5 --rtt-ms 87 --out /tmp/verify",
    "flows": "bufsize flows --flows 100 --hosts 50 --duration 5",
    "search": "bufsize search --flows 50 --out /tmp/search50",
    "sweep": "bufsize sweep --preset quick --out /tmp/quick",
    "measure": "bufsize measure --flows 10 --buffer-packets 60 --duration 30 --out /tmp/measure",
    "plot": "bufsize plot results/local/quick/latest --out /tmp/figures",
    "util-table": "bufsize util-table --flows 100,200 --out /tmp/util",
    "model": "bufsize model --flows 100 --rate-mbps 62.5 --rtt-ms 87",
    "shell": "bufsize shell --hosts 4 --rate-mbps 20 --rtt-ms 40",
    "remote": "bufsize remote --machine root@vm1 --machine root@vm2 --preset quick --out /tmp/remote --dry-run",
    "shortflows": "bufsize shortflows --users 50 --duration 60 --buffer-packets 50 --out /tmp/short",
    "shortexp": "bufsize shortexp loss --out /tmp/loss",
    "course": "bufsize course starter /tmp/assignment",
    "course starter": "bufsize course starter /tmp/assignment",
    "course check": "bufsize course check /tmp/assignment",
    "sim": "bufsize sim search --flows 100",
    "sim search": "bufsize sim search --flows 100 --out /tmp/twin100",
    "sim measure": "bufsize sim measure --flows 4 --rate-mbps 10 --rtt-ms 20 --buffer-packets 4 --duration 20",
    "sim sweep": "bufsize sim sweep --flows 10,50,200 --seeds 3 --out /tmp/twin-sweep",
    "sim util-table": "bufsize sim util-table --flows 100,200 --duration 20 --out /tmp/twin-util",
    "sim shortexp": "bufsize sim shortexp loss --out /tmp/twin-loss",
    "validate": "bufsize validate results/",
    "clean": "bufsize clean",
    "report": "bufsize report --check",
    "quick": "bufsize quick --dry-run",
}

EXIT_STATUSES = (
    "exit status: 0 done (a run: its result is valid); 1 failed (the run's error, a failed point or check, said"
    " on stderr); 2 refused before anything was built (bad options, a machine that cannot run it); 3 the run"
    " finished but its result is flagged invalid (result.json says which check failed); 130 interrupted, and"
    " torn down"
)


def add_epilogs(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """Give every subcommand below `parser` its example and the exit statuses, kept as written."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for name, sub in action.choices.items():
            key = f"{prefix} {name}".strip()
            sub.formatter_class = LineFormatter
            sub.epilog = f"example:\n  {EXAMPLES[key]}\n\n{EXIT_STATUSES}"
            add_epilogs(sub, key)


class LineFormatter(argparse.HelpFormatter):
    """argparse's formatter, but a description or epilog keeps its line breaks (each line is wrapped on
    its own), and an indented line (an example) is not wrapped, so that it can be copied whole."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n".join(
            indent + line
            if line.startswith("  ") or not line
            else textwrap.fill(line, width, initial_indent=indent, subsequent_indent=indent + "    ")
            for line in text.splitlines()
        )
