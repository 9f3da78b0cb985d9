"""The `bufsize remote` subcommand's options; the command itself is remote.py, imported only when it
runs (it needs Fabric, the `remote` extra, which no other command does)."""

from __future__ import annotations

import argparse

from bufsize.cli import options
from bufsize.remote.plan import DEFAULT_REMOTE_DIR
from bufsize.topologies.errors import UsageError


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `remote` to the subcommands of the bufsize parser."""
    r = sub.add_parser(
        "remote",
        help="run a sweep on Dask workers on other machines, reached and set up over SSH, merged into one directory",
        allow_abbrev=False,  # --mach must not pass for --machine, nor --host for --hosts (senders per point)
    )
    r.add_argument(
        "--machine",
        action="append",
        required=True,
        help="[USER@]ADDRESS[:PORT] of a machine to run on (user default root); repeat or separate with commas",
    )
    options.add_sweep_args(r)
    r.add_argument("--out", required=True, help="the merged sweep directory; re-running the same command resumes it")
    r.add_argument(
        "--replicate",
        action="store_true",
        help="every machine runs --runs runs of every N (the merged sweep has runs x machines); default: split",
    )
    r.add_argument("--identity", help="private key to log in with (default: the ssh agent's keys; never a password)")
    r.add_argument(
        "--known-hosts",
        default="~/.ssh/known_hosts",
        help="the pinned host keys; a machine whose key is not in it is refused (default ~/.ssh/known_hosts)",
    )
    r.add_argument(
        "--remote-dir",
        default=DEFAULT_REMOTE_DIR,
        help=f"working directory on each machine; {{machine}} is replaced by its label (default {DEFAULT_REMOTE_DIR})",
    )
    r.add_argument("--commit", help="commit to ship (default HEAD; without it, uncommitted changes are refused)")
    r.add_argument("--json", action="store_true", help="print the outcome (or with --dry-run the plan) as JSON")
    r.add_argument(
        "--dry-run", action="store_true", help="print who would run which point and for how long; contact nothing"
    )
    r.set_defaults(func=run)
    return r


def run(a: argparse.Namespace) -> int:
    try:
        from bufsize.remote.run import run_remote
    except ImportError as e:
        raise UsageError(
            f"bufsize remote needs Fabric ({e}): ./setup.sh installs it, or pip install -e '.[remote]'"
        ) from e
    return run_remote(a)
