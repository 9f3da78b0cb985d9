"""The `bufsize` command: parses, checks what it can before anything is created, and dispatches.

What a command does once parsed is in cli/commands.py, which calls the module that holds its logic
(longlived.verify, longlived.search, ...); options shared by several commands are declared in cli/options.py.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable
from typing import NoReturn

from bufsize import __version__
from bufsize.cli import commands, helptext, options, shell
from bufsize.cli import course as course_cli
from bufsize.cli import remote as remote_cli
from bufsize.cli import shortflows as shortflow_cli
from bufsize.cli import sim as sim_cli
from bufsize.cli import theory as model_cli
from bufsize.cli.options import add_flows_arg, add_link_args, add_measure_args, add_result_args, add_search_args
from bufsize.scaffold.projectfiles import LOCAL_RUNS_DIR
from bufsize.topologies.cleanup import release_deferred_signals, what_remains_message
from bufsize.topologies.errors import MachineError, RunError, UsageError

# How build_parser's helpers declare a command: its name, the function that runs it, its one-line help.
Command = Callable[[str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser]


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line naming the problem, exit status 2 (argparse would print the whole usage too).
        self.exit(2, f"{self.prog}: {message}\n")


class Stopped(SystemExit):
    """A stopping signal, as an exception, so every `with Dumbbell(...)` block tears down on the way out."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


def _on_signal(signum: int, _frame: object) -> None:
    raise Stopped(signum)


def build_parser() -> Parser:
    p = Parser(prog="bufsize", description="Router buffer sizing testbed: real TCP over an emulated dumbbell.")
    p.add_argument("--version", action="version", version=f"bufsize {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=Parser)

    def command(name: str, func, help_text: str) -> argparse.ArgumentParser:  # noqa: ANN001
        c = sub.add_parser(name, help=help_text)
        c.set_defaults(func=func)
        return c

    add_link_commands(command)
    model_cli.add_parser(sub)
    shell.add_parser(sub)
    remote_cli.add_parser(sub)
    shortflow_cli.add_parser(sub)
    course_cli.add_parser(sub)
    sim_cli.add_parser(sub)
    add_tool_commands(command)
    helptext.add_epilogs(p)
    return p


def add_link_commands(command: Command) -> None:
    """The commands that build a dumbbell or run on a link, and `plot` for what they write."""
    d = command("doctor", commands.cmd_doctor, "what this machine can do and which delay backend it will use")
    d.add_argument("--json", action="store_true")

    v = command(
        "verify", commands.cmd_verify, "build a dumbbell, measure RTT and bottleneck rate against the configuration"
    )
    options.add_topology_args(v)
    v.add_argument("--duration", type=float, default=5.0, help="seconds of rate measurement after warm-up")
    v.add_argument("--no-rate", action="store_true", help="measure RTTs only")
    add_result_args(v, "verify.json")

    f = command(
        "flows", commands.cmd_flows, "start N long-lived TCP flows, check all are established and carrying data"
    )
    options.add_topology_args(f)
    add_flows_arg(f)
    options.add_tool_arg(f)
    f.add_argument("--duration", type=float, default=5.0, help="seconds to run once all flows are up")
    f.add_argument("--json", action="store_true")

    s = command(
        "search", commands.cmd_search, "smallest buffer keeping the link at the target utilization (binary_search.py)"
    )
    options.add_preset_arg(s, "its link, hosts and search rule; default full")
    s.add_argument("--hosts", type=int, help="most sender hosts: the search uses min(N, this) (default 400)")
    add_link_args(s, rate=None, rtt=None, cc=None)
    options.add_buffer_args(s)
    add_flows_arg(s)
    add_search_args(s)
    # None: not given, so the preset's rule applies (sweep.search_rule); --precision 0 still turns it off.
    s.set_defaults(samples=None, resolution=None, max_samples=None, precision=None, target=None)
    add_result_args(s, "result.json, samples.csv and the monitors' data")
    options.add_print_config_arg(s)
    options.add_link_choice(s, "search")

    w = command("sweep", commands.cmd_sweep, "one search per (N, run) into a resumable sweep directory, then plot it")
    options.add_sweep_args(w)
    options.group(w, "output").add_argument("--out", help="sweep directory; re-running the same command resumes"
                                            " it (needed but for --print-config)")  # fmt: skip
    options.group(w, "the sweep").add_argument(
        "--points", help="only these N:run points of the sweep, e.g. 2:1,10:1 (what bufsize remote uses)"
    )
    options.add_link_choice(w, "sweep")
    add_report_args(w, "the plan")
    options.add_print_config_arg(w)

    m = command(
        "measure", commands.cmd_measure, "utilization, loss and queue at one fixed buffer, after the flows settle"
    )
    options.add_topology_args(m)
    add_flows_arg(m)
    add_measure_args(m)
    add_result_args(m, "result.json, the monitors' CSVs and plots")
    options.add_print_config_arg(m)
    options.add_link_choice(m, "measure")

    add_table_commands(command)


def add_table_commands(command: Command) -> None:
    """`plot`, for what the link commands write, and `util-table`, a table of measurements."""
    pl = command(
        "plot", commands.cmd_plot, "a sweep directory: figure and table; one run's directory: its monitor plots"
    )
    pl.add_argument("dir")
    pl.add_argument("--title")
    pl.add_argument("--with-sim", help="a twin sweep directory (`bufsize sweep --link simulated`) to overlay, "
                    "with an emulation/twin column")  # fmt: skip
    pl.add_argument(
        "--beside",
        action="append",
        default=[],
        help="another sweep directory to overlay, with its median and range and ours/its per N"
        " (e.g. a bbr sweep beside the cubic one); up to 3, one flag each",
    )
    pl.add_argument("--curves", metavar="N,N,...", help="the N whose utilization-against-buffer curves"
                    " curves.png draws (default: every N of the sweep)")  # fmt: skip
    pl.add_argument("--out", help="write the figures and tables here, not into DIR (created if missing)")
    pl.add_argument(
        "--force",
        action="store_true",
        help="redraw the committed results under results/ in place (without it they are plotted only with --out)",
    )
    pl.add_argument("--json", action="store_true", help="print the files written as JSON")

    u = command(
        "util-table",
        commands.cmd_util_table,
        "Appenzeller 2004 Fig 15: utilization at 0.5-3 x RTT*C/sqrt(n) beside the GSR",
    )
    options.add_util_table_args(u)
    add_link_args(u, rate=155.0, rtt="80..120")
    add_measure_args(u)
    u.add_argument("--json", action="store_true", help="print the table's rows and files as JSON (progress on stderr)")
    options.add_print_config_arg(u)
    options.add_link_choice(u, "util-table")


def add_tool_commands(command: Command) -> None:
    """The commands that check or clean up after runs, and the main job."""
    val = command("validate", commands.cmd_validate, "check results against their versioned JSON Schema")
    val.description = (
        "Check every result.json and sweep manifest.json in the given directories (or files) against the"
        " schema the toolkit writes them by. Prints one line per problem (file: key: what) and exits 0"
        " when there is none, 1 when there is any, 2 on bad arguments."
    )
    val.add_argument("dirs", nargs="+", metavar="DIR", help="a results directory (searched below) or one file")
    val.add_argument(
        "--migrate",
        action="store_true",
        help="first stamp files written before the schema existed (schema_version 1, and a result's kind);"
        " nothing else in them changes",
    )
    r = command("report", commands.cmd_report, "write the documentation's Results page from the committed sweeps")
    r.add_argument("--out", help="where to write the page (default: docs/results.md of this checkout)")
    r.add_argument("--check", action="store_true", help="write nothing; exit 1 if the page differs from the results'")
    c = command("clean", commands.cmd_clean, "remove what a killed run left behind (only the toolkit's own)")
    c.add_argument("--json", action="store_true", help="print what was removed and refused as JSON")
    q = command("quick", commands.cmd_quick, "the main job of ./setup.sh quick")
    q.add_argument(
        "--out",
        default=str(LOCAL_RUNS_DIR / "quick"),
        help="a timestamped run directory is made in here, and `latest` points at it (default: %(default)s,"
        " which git ignores; the committed reference runs are in results/quick/)",
    )
    add_report_args(q, "the plan")
    options.add_print_config_arg(q)


def add_report_args(p: argparse.ArgumentParser, plan: str) -> None:
    g = options.group(p, "output")
    g.add_argument("--json", action="store_true", help="print the outcome as JSON on stdout (progress on stderr)")
    g.add_argument("--dry-run", action="store_true", help=f"print {plan} and its estimated time; build nothing")


# The experiments that run on either link. `--link simulated` hands the command line to the twin's
# parser (bufsize sim CMD), which offers only the options that mean something in a simulation: one
# asked for on the wrong link is refused by name as an unrecognized argument, before anything runs.
LINK_COMMANDS = ("search", "measure", "sweep", "util-table", "shortexp")


def route_link(argv: list[str]) -> list[str]:
    """`CMD ... --link simulated ...` as `sim CMD ...`, and `--link emulated` dropped; anything else as given
    (a bad --link value is left for the parser to refuse)."""
    if not argv or argv[0] not in LINK_COMMANDS:
        return argv
    rest, links = [], []
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest += argv[i:]
            break
        value = arg.split("=", 1)[1] if arg.startswith("--link=") else None
        if arg == "--link" and i + 1 < len(argv) and argv[i + 1] in options.LINKS:
            value = argv[i + 1]
            i += 1
        if value in options.LINKS:
            links.append(value)
        else:
            rest.append(arg)
        i += 1
    if len(links) > 1:
        raise UsageError(f"--link given {len(links)} times: give it once")
    return ["sim", argv[0], *rest] if links == ["simulated"] else [argv[0], *rest]


def main(argv: list[str] | None = None) -> int:
    try:
        argv = route_link(list(sys.argv[1:] if argv is None else argv))
    except UsageError as e:
        print(f"bufsize: {e}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1):
        signal.signal(s, _on_signal)
    # Background jobs start with SIGINT ignored; Ctrl-C (kill -INT) must still stop and tear down a run.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        try:
            return args.func(args)
        finally:
            release_deferred_signals()  # a signal noted for a result that was then not saved
    except (UsageError, MachineError, RunError, OSError) as e:  # OSError: a system call outside the checks
        print(f"bufsize {args.cmd}: {' '.join(str(e).split()) or type(e).__name__}", file=sys.stderr)
        return getattr(e, "exit_status", 1)
    except (KeyboardInterrupt, Stopped) as e:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # torn down already: a further Ctrl-C must not garble this
        by = f" by {signal.Signals(e.signum).name}" if isinstance(e, Stopped) else ""
        print(f"bufsize {args.cmd}: interrupted{by}; {what_remains_message()}", file=sys.stderr)  # checked
        return 128 + e.signum if isinstance(e, Stopped) else 130


if __name__ == "__main__":
    sys.exit(main())
