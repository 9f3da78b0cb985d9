"""The `bufsize shortflows` subcommand: its options and dispatch (the experiment is run.py)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from bufsize.cli import options
from bufsize.scaffold import lists
from bufsize.scaffold.resultdir import check_out_dir, exit_status, table_rows
from bufsize.shortflows.fig10 import Fig10Spec
from bufsize.shortflows.fig12 import Fig12Spec
from bufsize.shortflows.loss import LossSpec
from bufsize.shortflows.mix import MixSpec
from bufsize.shortflows.run import SHORT_WARMUP_S, ShortFlowOptions, format_shortflows, run_shortflows
from bufsize.shortflows.series import EmulatedPoints, run_series
from bufsize.shortflows.transfer import TransferSpec
from bufsize.topologies.errors import UsageError
from bufsize.topologies.machine import require_root
from bufsize.topologies.units import check_number
from bufsize.traffic.workload import DEFAULT_CAP_BYTES, Workload


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "shortflows",
        help="short-lived flows (open or closed loop, with or without long flows) at one buffer: "
        "completion times, loss, the queue's tail",
    )
    options.add_topology_args(p)
    p.add_argument("--flows", type=int, default=0, help="long-lived flows beside the short ones (default 0)")
    p.add_argument(
        "--sizes",
        default="fixed:14",
        help="transfer sizes: fixed:L, uniform:A:B, exp:MEAN, expmix:P@M+..., pareto:ALPHA:MIN,"
        " lnpareto:MU:SIGMA:CUT:ALPHA:PTAIL or web; lengths in packets (14) or bytes (20KB) (default fixed:14)",
    )
    p.add_argument("--load", type=float, default=0.0, help="open loop: Poisson arrivals offering this share of C")
    p.add_argument("--users", type=int, default=0, help="closed loop: users who transfer, think and repeat")
    p.add_argument("--think-s", type=float, default=1.0, help="closed loop: mean think time (default 1)")
    p.add_argument("--think", choices=("exp", "pareto"), default="exp",
                   help="closed loop: think-time distribution; pareto: shape 1.5, as SURGE (default exp)")  # fmt: skip
    p.add_argument("--transfers", type=int, help="stop after this many arrivals (open loop) or per user (closed loop)")
    p.add_argument("--duration", type=float, help="stop starting transfers after this many seconds")
    p.add_argument("--warmup-s", type=float, default=SHORT_WARMUP_S,
                   help=f"seconds of short flows before the measured window (default {SHORT_WARMUP_S:g})")  # fmt: skip
    p.add_argument("--long-warmup-s", type=float,
                   help="seconds the long flows run before the short ones (default: one cycle, >= 15)")  # fmt: skip
    p.add_argument("--initcwnd", type=int, help="senders' initial window in packets (default: the kernel's, 10)")
    p.add_argument("--max-window", type=int,
                   help="cap every short transfer's window at this many packets, as ns-2's window_ (default: none;"
                   " long flows are not capped)")  # fmt: skip
    p.add_argument("--ladder", help="then step the buffer down in place to these packets, e.g. 100,50,20 (Fig 12)")
    p.add_argument("--ladder-window-s", type=float, default=30.0,
                   help="seconds measured at the first buffer and at each ladder step (default 30)")  # fmt: skip
    p.add_argument("--seed", type=int, default=1, help="random seed of arrivals and sizes (default 1)")
    p.add_argument("--max-size", type=float, default=DEFAULT_CAP_BYTES, help="cap on a transfer's bytes (default 1e7)")
    p.add_argument("--timeout-s", type=float, default=120.0, help="a transfer not done by then is failed (default 120)")
    options.add_tool_arg(p)
    p.add_argument("--fidelity-s", type=float, default=0.0, help="seconds of pacing trace in the window (default 0)")
    options.add_result_args(p, "result.json, transfers.csv, the monitors' CSVs and plots")
    options.add_print_config_arg(p)
    p.set_defaults(func=run)

    e = sub.add_parser(
        "shortexp",
        help="a named short-flow experiment: fig10 (Appenzeller 2004: mean queue vs flow length), fig12 (buffer for"
        " completion time), loss (Dhamdhere 2006 Fig 1)"
        ", mix (Appenzeller 2004 Figs 13-14) or transfer (Tomioka: web transfer times at C x RTT and C x RTT/sqrt(N))",
    )
    e.add_argument("name", choices=("fig10", "fig12", "loss", "mix", "transfer"))
    options.add_link_choice(e, "shortexp loss")  # loss and mix run on the twin too
    e.add_argument("--out", required=True, help="directory; re-running the same command resumes it")
    e.add_argument("--duration", type=float,
                   help="measured seconds per point or ladder step (default 40; fig12 30, loss 60)")  # fmt: skip
    e.add_argument("--rates", help="fig10, fig12: link rates in Mb/s (default 5,10,20; 5,20)")
    e.add_argument(
        "--lengths", help="fig10, fig12: flow lengths in packets (default 2,6,14,16,30,62,100; 2,14,30,62,100)"
    )
    e.add_argument("--initcwnd", type=int,
                   help="fig10, transfer: senders' initial window (default: fig10 2, as the 2004 paper assumes;"
                   " transfer the kernel's 10)")  # fmt: skip
    e.add_argument("--max-window", type=int,
                   help="transfer, loss (C, O): cap every transfer's window at this many packets"
                   " (ns-2's window_: 20)")  # fmt: skip
    e.add_argument("--hosts", type=int, help="fig10: sender hosts (default 10)")
    e.add_argument("--workloads", help="loss: any of P (persistent), C (closed loop), O (open loop) (default P,C,O)")
    e.add_argument("--buffers", help="loss: buffers in packets (default 18,50,100,250,500)")
    e.add_argument("--long-flows", help="mix: numbers of long flows (default 10,50,100,200,400)")
    e.add_argument("--users", type=int, help="loss, transfer: closed-loop users (default 600, 500)")
    e.add_argument("--json", action="store_true", help="print the outcome and the table's rows as JSON")
    options.add_print_config_arg(e)
    e.set_defaults(func=run_experiment)
    return p


# Each experiment: its spec, the options it takes, and the spec field --duration sets.
EXPERIMENTS = {
    "fig10": (Fig10Spec, ("rates", "lengths", "initcwnd", "hosts"), "duration_s"),
    "fig12": (Fig12Spec, ("rates", "lengths"), "window_s"),
    "loss": (LossSpec, ("workloads", "buffers", "users", "max_window"), "duration_s"),
    "mix": (MixSpec, ("long_flows",), "duration_s"),
    "transfer": (TransferSpec, ("users", "initcwnd", "max_window"), "duration_s"),
}
# Each option: the spec field it sets and how its text becomes the value.
FIELDS = {
    "rates": ("rates_mbps", lambda t: lists.parse_float_list("--rates", t, 0, 1000)),
    "lengths": ("lengths", lambda t: whole_numbers("--lengths", t)),
    "initcwnd": ("initcwnd", int),
    "max_window": ("max_window", int),
    "hosts": ("hosts", int),
    "workloads": ("workloads", lambda t: [w.strip().upper() for w in t.split(",")]),
    "buffers": ("buffers", lambda t: whole_numbers("--buffers", t)),
    "users": ("users", int),
    "long_flows": ("long_flows", lambda t: whole_numbers("--long-flows", t)),
}


def experiment_spec(a: argparse.Namespace) -> Fig10Spec | Fig12Spec | LossSpec | MixSpec | TransferSpec:
    cls, own, duration_field = EXPERIMENTS[a.name]
    given = [k for k in FIELDS if getattr(a, k, None) is not None]  # the twin's parser has only some
    wrong = sorted(k.replace("_", "-") for k in given if k not in own)
    if wrong:
        raise UsageError(f"shortexp {a.name} does not take --{', --'.join(wrong)}")
    spec = cls()
    for k in given:
        name, parse = FIELDS[k]
        setattr(spec, name, parse(getattr(a, k)))
    if a.duration is not None:
        check_number("--duration", a.duration, 1, 24 * 3600, lo_inclusive=True)
        setattr(spec, duration_field, a.duration)
    return spec


def whole_numbers(name: str, text: str) -> list[int]:
    xs = lists.parse_float_list(name, text, 0, 100_000)
    if not all(x.is_integer() for x in xs):
        raise UsageError(f"{name} {text}: whole numbers")
    return [int(x) for x in xs]


def run_experiment(a: argparse.Namespace) -> int:
    spec = experiment_spec(a)
    spec.validate()
    if options.printed_config(a, {"experiment": a.name, "spec": spec, "points": spec.points()}):
        return 0
    require_root()
    out = check_out_dir(a.out)
    return series_done(a, out, run_series(out, spec, EmulatedPoints(spec.points()[0][1].backend())))


def series_done(a: argparse.Namespace, out: Path, res: dict, beside: bool = False) -> int:
    """What a series prints when its points have run, on either link; 1 if any failed."""
    if a.json:
        print(json.dumps({"out": str(out), **res, "table": table_rows(out)}, indent=1))
    else:
        print(f"{res['finished']} of {res['points']} points finished in {out}/ (table.md, figure.png"
              f"{', beside.md' if beside else ''})")  # fmt: skip
        for f in res["failed"]:
            print(f"failed: {f}")
    return 0 if not res["failed"] else 1


def run(a: argparse.Namespace) -> int:
    if a.buffer_bytes is None and a.buffer_packets is None:
        raise UsageError("give the buffer under study: --buffer-packets or --buffer-bytes")
    if not (math.isfinite(a.max_size) and a.max_size == int(a.max_size)):
        raise UsageError(f"--max-size {a.max_size:g}: must be a whole number of bytes")
    workload = Workload(
        sizes=a.sizes, load=a.load, users=a.users, think_s=a.think_s, think=a.think, transfers=a.transfers,
        duration_s=a.duration, seed=a.seed, cap_bytes=int(a.max_size), timeout_s=a.timeout_s,
    )  # fmt: skip
    ladder = whole_numbers("--ladder", a.ladder) if a.ladder is not None else []
    opts = ShortFlowOptions(
        workload, a.flows, a.warmup_s, a.initcwnd, a.max_window, a.tool, a.fidelity_s,
        long_warmup_s=a.long_warmup_s, ladder_packets=ladder, ladder_window_s=a.ladder_window_s,
    )  # fmt: skip
    opts.validate()
    cfg = options.config_from_args(a)
    cfg.validate()
    if options.printed_config(a, {"config": cfg, "options": opts}):
        return 0
    require_root()
    backend = cfg.backend()  # before --out is made: a refusal there leaves nothing behind
    out = None
    if a.out is not None:
        out = check_out_dir(a.out)
        if (out / "result.json").exists() and not a.force:
            raise UsageError(f"--out {out} already holds a result.json; choose another directory or add --force")
    assert cfg.buffer_bytes is not None
    result = run_shortflows(cfg, backend, cfg.buffer_bytes, opts, out, log=(lambda s: None) if a.json else None)
    print(json.dumps(result, indent=1) if a.json else format_shortflows(result, Path(a.out) if a.out else None))
    return exit_status(result)
