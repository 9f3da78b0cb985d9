"""The `bufsize` command: parses, checks what it can before anything is created, and dispatches.

Each command's logic lives in its own module (verify, flows, search, measure, sweep, utiltable,
quick, report, model_cli); options shared by several commands are declared in options.py.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import NoReturn

from buffersizing import model_cli, options, remote_cli, shell, shortflow_cli
from buffersizing.experiment import Say, stderr_say
from buffersizing.measure import MeasureOptions
from buffersizing.options import add_flows_arg, add_link_args, add_measure_args, add_result_args, add_search_args
from buffersizing.resultdir import check_out_dir
from topologies.cleanup import release_deferred_signals, what_remains_message
from topologies.config import DumbbellConfig
from topologies.errors import MachineError, RunError, UsageError
from topologies.machine import delay_backend, require_root


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line naming the problem, exit status 2 (argparse would print the whole usage too).
        self.exit(2, f"{self.prog}: {message}\n")


def _on_signal(signum: int, _frame: object) -> None:
    # Turn SIGTERM/SIGHUP into an exception so every `with Dumbbell(...)` block tears down.
    raise SystemExit(128 + signum)


def result_dir(a: argparse.Namespace, name: str = "result.json") -> Path | None:
    """--out checked (a writable directory, no earlier result unless --force) before anything is built."""
    if a.out is None:
        return None
    out = check_out_dir(a.out)
    if (out / name).exists() and not a.force:
        raise UsageError(f"--out {out} already holds a {name}; choose another directory or add --force")
    return out


def quiet_if(flag: bool) -> Say | None:
    return (lambda s: None) if flag else None  # None: progress on stderr


def cmd_doctor(a: argparse.Namespace) -> int:
    from buffersizing.presets import format_preset_methods, preset_methods
    from topologies.machine import format_report, probe

    caps = probe()
    methods = preset_methods(caps.qdiscs, caps.delayline_built)
    if a.json:
        print(json.dumps(caps.to_dict() | {"presets": methods}, indent=1))
    else:
        print(format_report(caps) + "\n" + format_preset_methods(methods))
    return 0 if not caps.problems else 1


def cmd_verify(a: argparse.Namespace) -> int:
    from buffersizing.verify import check_duration, format_summary, run_verify

    cfg = options.config_from_args(a)
    check_duration(a.duration)
    require_root()
    out = result_dir(a, "verify.json")
    if not a.json:
        print(f"building a dumbbell of {cfg.hosts} hosts and measuring it ...", file=sys.stderr)
    s = run_verify(cfg, cfg.backend(), a.duration, rate_test=not a.no_rate, out=out)
    print(json.dumps(s, indent=1) if a.json else format_summary(s))
    return 0 if s["ok"] else 1


def cmd_flows(a: argparse.Namespace) -> int:
    from buffersizing.flows import check_duration, format_flows, run_flows
    from buffersizing.traffic import split_flows

    cfg = options.config_from_args(a)
    split_flows(a.flows, cfg.hosts)
    check_duration(a.duration)
    require_root()
    s = run_flows(cfg, cfg.backend(), a.flows, a.tool, a.duration, quiet_if(a.json) or stderr_say)
    print(json.dumps(s, indent=1) if a.json else format_flows(s, a.duration))
    return 0


def cmd_search(a: argparse.Namespace) -> int:
    from buffersizing.search import SearchOptions, resolved_config, run_search

    if a.buffer_bytes is not None or a.buffer_packets is not None:
        raise UsageError("search chooses the buffer itself: drop --buffer-bytes/--buffer-packets")
    cfg = options.config_from_args(a)
    opts = SearchOptions(a.flows, a.target, a.relative_to, a.samples, a.settle_s, a.sample_s,
                         resolution=a.resolution, max_samples=a.max_samples, alpha=a.alpha,
                         max_buffer_packets=a.max_buffer_packets, first_guess=not a.no_first_guess, tool=a.tool,
                         fidelity_s=a.fidelity_s)  # fmt: skip
    opts.validate(cfg)
    if a.print_config:  # resolved and checked; nothing is built
        return print(json.dumps(resolved_config(cfg, opts))) or 0
    require_root()
    out = result_dir(a)
    result = run_search(cfg, cfg.backend(), opts, out, log=quiet_if(a.json))
    if a.json:
        print(json.dumps(result, indent=1))
    elif out is not None:
        print(f"result written to {out}/result.json")
    return 0 if result["valid"] else 3


def measure_options(a: argparse.Namespace, flows: int, cfg: DumbbellConfig) -> MeasureOptions:
    o = MeasureOptions(flows, a.duration, a.settle_s, a.sample_s, a.reference_s, a.fidelity_s, a.tool)
    o.validate(cfg)
    return o


def cmd_measure(a: argparse.Namespace) -> int:
    from buffersizing.measure import format_measure, run_measure

    if a.buffer_bytes is None and a.buffer_packets is None:
        raise UsageError("give the buffer under study: --buffer-packets or --buffer-bytes")
    cfg = options.config_from_args(a)
    opts = measure_options(a, a.flows, cfg)
    require_root()
    out = result_dir(a)
    assert cfg.buffer_bytes is not None
    result = run_measure(cfg, cfg.backend(), [cfg.buffer_bytes], opts, out, log=quiet_if(a.json))
    print(json.dumps(result, indent=1) if a.json else format_measure(result, out))
    return 0 if result["valid"] else 3


def cmd_util_table(a: argparse.Namespace) -> int:
    from buffersizing.utiltable import MAX_MULTIPLE, check_table, run_util_table

    flows = options.parse_flow_list(a.flows)
    multiples = options.parse_float_list("--multiples", a.multiples, 0, MAX_MULTIPLE)
    check_table(flows, multiples, a.hosts)
    configs = {n: options.link_config(a, min(n, a.hosts)) for n in flows}
    opts = {n: measure_options(a, n, configs[n]) for n in flows}
    require_root()
    out = check_out_dir(a.out)  # before the backend probe builds its namespace
    backend = delay_backend(a.delay_backend, a.shaper)
    paths = run_util_table(out, flows, multiples, a.hosts, configs.get, opts.get, backend, stderr_say)
    for path in paths:
        print(f"wrote {path}")
    return 0


def cmd_sweep(a: argparse.Namespace) -> int:
    from buffersizing.report import make_report
    from buffersizing.sweep import parse_points, run_sweep, spec_from_args

    spec = spec_from_args(a)
    only = parse_points(a.points, spec) if a.points is not None else None
    out = check_out_dir(a.out)
    require_root()
    backend = delay_backend(spec.delay_backend, spec.shaper)
    res = run_sweep(out, spec, backend, only=only, allow_mixed_shapers=a.allow_mixed_shapers)
    if res["finished"]:
        for path in make_report(out):
            print(f"wrote {path}")
    if res["failed"]:
        print(f"{len(res['failed'])} point(s) failed; re-run the same command to retry them:", file=sys.stderr)
        for f in res["failed"]:
            print(f"  {f}", file=sys.stderr)
        return 1
    return 0


def cmd_plot(a: argparse.Namespace) -> int:
    from buffersizing.report import plot_dir

    for path in plot_dir(a.dir, a.title):
        print(f"wrote {path}")
    return 0


def cmd_clean(a: argparse.Namespace) -> int:
    from topologies.cleanup import clean_leftovers

    require_root()
    report = clean_leftovers()  # refuses an unsafe state directory (MachineError) before anything
    print(report.summary())
    print("".join(f"bufsize clean: {r}\n" for r in report.refused), end="", file=sys.stderr)
    return 1 if report.refused else 0


def cmd_quick(a: argparse.Namespace) -> int:
    from buffersizing.quick import run_quick

    require_root()
    return run_quick(a.out)


def build_parser() -> Parser:
    p = Parser(prog="bufsize", description="Router buffer sizing testbed: real TCP over an emulated dumbbell.")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=Parser)

    def command(name: str, func, help_text: str) -> argparse.ArgumentParser:  # noqa: ANN001
        c = sub.add_parser(name, help=help_text)
        c.set_defaults(func=func)
        return c

    d = command("doctor", cmd_doctor, "what this machine can do and which delay backend it will use")
    d.add_argument("--json", action="store_true")

    v = command("verify", cmd_verify, "build a dumbbell, measure RTT and bottleneck rate against the configuration")
    options.add_topology_args(v)
    v.add_argument("--duration", type=float, default=5.0, help="seconds of rate measurement after warm-up")
    v.add_argument("--no-rate", action="store_true", help="measure RTTs only")
    add_result_args(v, "verify.json")

    f = command("flows", cmd_flows, "start N long-lived TCP flows, check all are established and carrying data")
    options.add_topology_args(f)
    add_flows_arg(f)
    options.add_tool_arg(f)
    f.add_argument("--duration", type=float, default=5.0, help="seconds to run once all flows are up")
    f.add_argument("--json", action="store_true")

    s = command("search", cmd_search, "smallest buffer keeping the link at the target utilization (binary_search.py)")
    options.add_topology_args(s)
    add_flows_arg(s)
    add_search_args(s)
    add_result_args(s, "result.json, samples.csv and the monitors' data")
    s.add_argument("--print-config", action="store_true", help="print the resolved configuration as JSON and exit")

    w = command("sweep", cmd_sweep, "one search per (N, run) into a resumable sweep directory, then plot it")
    options.add_sweep_args(w)
    w.add_argument("--out", required=True, help="sweep directory; re-running the same command resumes it")
    w.add_argument("--points", help="only these N:run points of the sweep, e.g. 2:1,10:1 (what bufsize remote uses)")

    pl = command("plot", cmd_plot, "a sweep directory: figure and table; one run's directory: its monitor plots")
    pl.add_argument("dir")
    pl.add_argument("--title")

    m = command("measure", cmd_measure, "utilization, loss and queue at one fixed buffer, after the flows settle")
    options.add_topology_args(m)
    add_flows_arg(m)
    add_measure_args(m)
    add_result_args(m, "result.json, the monitors' CSVs and plots")

    u = command("util-table", cmd_util_table, "seed 000 Fig 15: utilization at 0.5-3 x RTT*C/sqrt(n) beside the GSR")
    u.add_argument("--out", required=True, help="directory (re-running the same command keeps finished rows)")
    u.add_argument("--flows", default="100,200,300,400", help="numbers of flows (default 100,200,300,400)")
    u.add_argument("--multiples", default="0.5,1,2,3", help="buffers as multiples of 1291/sqrt(n) packets")
    u.add_argument("--hosts", type=int, default=400, help="most sender hosts (default 400)")
    add_link_args(u, rate=155.0, rtt="80..120")
    add_measure_args(u)

    model_cli.add_parser(sub)
    shell.add_parser(sub)
    remote_cli.add_parser(sub)
    shortflow_cli.add_parser(sub)
    command("clean", cmd_clean, "remove what a killed run left behind (only the toolkit's own)")
    q = command("quick", cmd_quick, "the main job of ./setup.sh quick")
    q.add_argument("--out", default="results/quick", help="a timestamped run directory is made in here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGHUP, _on_signal)
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
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # torn down already: a further Ctrl-C must not garble this
        print(f"bufsize {args.cmd}: interrupted; {what_remains_message()}", file=sys.stderr)  # checked, not assumed
        return 130


if __name__ == "__main__":
    sys.exit(main())
