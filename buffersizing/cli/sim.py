"""`bufsize sim search|measure|sweep`: the emulated commands' options on the ns-3 twin.

The search options are the emulated search's own (options.add_search_args); the link options are
those that mean something in a simulation (no shaper, delay backend or pacer: the twin's bottleneck
is an exact drop-tail FIFO at rate C), plus --seed. Needs no root: nothing is built on the machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bufsize.cli.commands import quiet_if, result_dir, sweep_dir, swept
from bufsize.cli.options import (
    add_measure_timing_args,
    add_path_args,
    add_preset_arg,
    add_print_config_arg,
    add_result_args,
    add_search_args,
    add_sender_pacing_arg,
    add_util_table_args,
    group,
    printed_config,
)
from bufsize.longlived.presets import DEFAULT_PRESET, preset
from bufsize.longlived.search import SearchOptions
from bufsize.longlived.sweep import search_rule
from bufsize.scaffold.cluster import KINDS, Where
from bufsize.scaffold.lists import parse_float_list, parse_flow_list
from bufsize.scaffold.resultdir import check_out_dir, exit_status
from bufsize.scaffold.runs import Simulated
from bufsize.scaffold.twin import check_start_buffer
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.config import parse_rtts
from bufsize.topologies.errors import UsageError
from bufsize.topologies.nssim import MAX_SIM_FLOWS, MAX_SIM_HOSTS, SIM_CCS, SIM_RTOS, SimConfig

# Option groups of the twin's commands beside those of cli/options.py.
HOSTS, SIM = "hosts, flows and buffer", "the simulation"


def add_sim_link_args(p: argparse.ArgumentParser, hosts_help: str, by_preset: bool = False, **path: object) -> None:
    """The twin's link options; `by_preset`: the rate, RTT and cc default to the preset's (search, sweep);
    `path`: other defaults for add_path_args (util-table's 155 Mb/s)."""
    if "hosts" not in {a.dest for a in p._actions}:  # util-table's comes with its rows
        group(p, HOSTS).add_argument("--hosts", type=int, help=hosts_help)
    # ns-3's TcpLinuxReno, TcpCubic or TcpBbr.
    none = {"rate": None, "rtt": None, "cc": None} if by_preset else {}
    add_path_args(p, ccs=SIM_CCS, access_help="access link rate (default 1000)", **none, **path)  # type: ignore[arg-type]
    group(p, "the traffic").add_argument(
        "--start-spread-s",
        type=float,
        default=1.0,
        help="the long flows start at random times over this many simulated seconds (default 1); about one "
        "RTT is nearer the emulation, whose flows all write their first byte at once, and keeps 10 Gb/s runs "
        "from hours of ns-3's loss recovery (docs/twin.md)",
    )
    group(p, SIM).add_argument(
        "--ns3-attribute",
        action="append",
        default=[],
        metavar="ns3::TYPE::NAME=VALUE",
        help="an ns-3 attribute default set over the twin's Linux-like ones, for example "
        "ns3::TcpCubic::HyStart=false; repeatable; recorded in the result's config",
    )


def add_start_buffer_arg(p: argparse.ArgumentParser, measure: bool = False) -> None:
    """--start-buffer: where the flows start, below the calibration (search) or warm-up (measure) buffer."""
    if measure:
        text = ("the buffer the flows start at: calibration (the warm-up buffer, 2 BDP, default, as emulated), "
                "small (the smallest buffer measured, at least one packet per flow) or packets; the warm-up then "
                "runs again at the warm-up buffer")  # fmt: skip
    else:
        text = ("the buffer the flows start at before calibration: calibration (2 BDP, default, as emulated), "
                "small (the model's first probe, at least one packet per flow) or packets")  # fmt: skip
    group(p, "the traffic").add_argument(
        "--start-buffer",
        default="calibration",
        help=text + "; a small one keeps slow start from "
        "overshooting a large buffer, which at 1 Gb/s and above costs the simulator hours (docs/twin.md)",
    )


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`bufsize sim` and its subcommands. One function: a flat list of declarations, read top to
    bottom against `bufsize sim --help`; split, it would only scatter them."""
    sim = sub.add_parser("sim", help="the same experiments on the ns-3 twin of the dumbbell (no root needed)")
    cmds = sim.add_subparsers(dest="sim_cmd", required=True, parser_class=type(sim))

    s = cmds.add_parser("search", help="smallest buffer keeping the simulated link at the target utilization")
    group(s, HOSTS).add_argument("--flows", type=int, default=10, help="long-lived flows (default 10)")
    add_preset_arg(s, "its link and search rule; default full; bic, which ns-3 lacks, runs as cubic")
    add_sim_link_args(s, "sender hosts (default: one per flow up to 400)", by_preset=True)
    group(s, SIM).add_argument(
        "--seed", type=int, default=1, help="the simulation's seed (default 1): same seed, same answer"
    )
    add_start_buffer_arg(s)
    group(s, SIM).add_argument(
        "--fresh-starts",
        action="store_true",
        help="measure every buffer probed in a run of its own: the flows started afresh at that buffer and "
        "warmed up, as a simulation that restarts at each buffer does (default: the buffer changed under the "
        "running flows, as on the emulated link)",
    )
    add_search_args(s)
    s.set_defaults(samples=None, resolution=None, max_samples=None, precision=None, target=None)
    add_result_args(s, "result.json and samples.csv")
    add_print_config_arg(s)
    s.set_defaults(func=cmd_sim_search)

    m = cmds.add_parser("measure", help="utilization, loss and queue of the simulated link at one buffer")
    group(m, HOSTS).add_argument("--flows", type=int, default=10, help="long-lived flows (default 10)")
    add_sim_link_args(m, "sender hosts (default: one per flow up to 400)")
    group(m, SIM).add_argument("--seed", type=int, default=1, help="the simulation's seed (default 1)")
    group(m, HOSTS).add_argument("--buffer-packets", type=int, required=True, help="bottleneck buffer in packets")
    add_sender_pacing_arg(m)  # search and sweep have it from add_search_args
    add_measure_timing_args(m)  # the emulated measure's own, in simulated seconds
    add_start_buffer_arg(m, measure=True)
    add_result_args(m, "result.json")
    add_print_config_arg(m)
    m.set_defaults(func=cmd_sim_measure)

    w = cmds.add_parser("sweep", help="one twin search per (N, seed), several at a time, resumable")
    group(w, HOSTS).add_argument("--flows", help="numbers of flows, comma-separated (default: the preset's)")
    group(w, SIM).add_argument("--seeds", type=int, default=3, help="searches per N, seeds 1..this (default 3)")
    add_preset_arg(w, "its N, link and search rule; default full; bic, which ns-3 lacks, runs as cubic")
    add_sim_link_args(w, "most sender hosts; each point uses min(N, this) (default 400)", by_preset=True)
    add_start_buffer_arg(w)
    add_search_args(w)
    w.set_defaults(samples=None, resolution=None, max_samples=None, precision=None, target=None)
    group(w, SIM).add_argument("--cluster", choices=KINDS, default="local", help="where the points run: local, "
                               "Dask workers on this machine (default); slurm, each worker a Slurm job of one "
                               "core, over TLS (docs/cloud.md)")  # fmt: skip
    group(w, SIM).add_argument("--workers", "--jobs", dest="jobs", type=int, help="Dask workers, one simulation "
                               "each (default: one per CPU here; with slurm, the most jobs at once, default 8); "
                               "the sweep prints its live page")  # fmt: skip
    group(w, SIM).add_argument("--scheduler-host", help="slurm: the address the nodes reach this machine at "
                               "(default: its fully qualified name)")  # fmt: skip
    group(w, "output").add_argument("--out", help="sweep directory; re-running the same command resumes it"
                                    " (needed but for --print-config)")  # fmt: skip
    add_print_config_arg(w)
    w.set_defaults(func=cmd_sim_sweep)

    u = cmds.add_parser("util-table", help="Appenzeller 2004 Fig 15 on the twin: utilization at 0.5-3 x RTT*C/sqrt(n)")
    add_util_table_args(u)
    add_sim_link_args(u, "most sender hosts; row n uses min(n, this)", rate=155.0, rtt="80..120")
    group(u, SIM).add_argument("--seed", type=int, default=1, help="the simulation's seed (default 1)")
    add_sender_pacing_arg(u)
    add_measure_timing_args(u)
    add_start_buffer_arg(u, measure=True)
    group(u, "output").add_argument(
        "--json", action="store_true", help="print the table's rows and files as JSON (progress on stderr)"
    )
    add_print_config_arg(u)
    u.set_defaults(func=cmd_sim_util_table)

    e = cmds.add_parser("shortexp", help="a short-flow experiment on the twin: loss (Dhamdhere 2006 Fig 1) or mix "
                        "(Appenzeller 2004 Figs 13-14)")  # fmt: skip
    e.add_argument("name", choices=("loss", "mix"))
    e.add_argument("--out", required=True, help="directory; re-running the same command resumes it")
    e.add_argument("--duration", type=float, help="measured seconds per point (default 60)")
    e.add_argument("--workloads", help="loss: any of P (persistent), C (closed loop), O (open loop) (default P,C,O)")
    e.add_argument("--buffers", help="loss: buffers in packets (default 18,50,100,250,500)")
    e.add_argument("--users", type=int, help="loss: closed-loop users (default 600)")
    e.add_argument("--long-flows", help="mix: numbers of long flows (default 10,50,100,200,400)")
    e.add_argument("--seed", type=int, default=1, help="the workload's and the simulation's seed (default 1)")
    e.add_argument("--iw", type=int, default=10,
                   help="TCP's initial window in packets (default 10, Linux's; mix uses its own, 2)")  # fmt: skip
    e.add_argument("--rto", choices=SIM_RTOS, default="linux",
                   help="linux: srtt + max(4 rttvar, 200 ms) (default); ns2: max(1 s, srtt + 4 rttvar), "
                   "ns-2's")  # fmt: skip
    add_print_config_arg(e)
    e.add_argument("--beside", help="an emulated `bufsize shortexp` directory of the same experiment run with "
                   "the same options: beside.md compares the two point for point")  # fmt: skip
    e.add_argument("--json", action="store_true", help="print the outcome and the table's rows as JSON")
    e.set_defaults(func=cmd_sim_shortexp)


def sim_config(a: argparse.Namespace, flows: int, hosts: int, seed: int) -> SimConfig:
    if None in (a.rate_mbps, a.rtt_ms, a.cc):
        method(a)  # search and sweep: the preset's link where not given
    if not 1 <= flows <= MAX_SIM_FLOWS:  # before the hosts, which default to min(flows, 400)
        raise UsageError(f"--flows {flows}: the twin takes 1 to {MAX_SIM_FLOWS}")
    if not 1 <= hosts <= MAX_SIM_HOSTS:  # before parse_rtts spreads a range over them
        raise UsageError(f"--hosts {hosts}: must be from 1 to {MAX_SIM_HOSTS}")
    cfg = SimConfig(hosts, a.rate_mbps, parse_rtts(a.rtt_ms, hosts), a.cc, a.access_mbps, seed,
                    delayed_ack=a.delayed_ack == "on", sender_pacing=a.sender_pacing == "on",
                    start_spread_s=a.start_spread_s, attributes=tuple(a.ns3_attribute))  # fmt: skip
    cfg.validate(flows)
    return cfg


def method(a: argparse.Namespace) -> dict:
    """The preset behind a twin search or sweep (the published figures' unless --preset), with its link
    filled into the options not given; a cc the twin lacks (bic) becomes cubic, said on stderr and
    recorded in the result's config."""
    name = getattr(a, "preset", None) or DEFAULT_PRESET
    pre = preset(name)
    if getattr(a, "rate_mbps", 0) is None:
        a.rate_mbps = pre["rate_mbps"]
    if getattr(a, "rtt_ms", 0) is None:
        a.rtt_ms = pre["rtt_ms"]
    if getattr(a, "cc", 0) is None:
        a.cc = pre["cc"] if pre["cc"] in SIM_CCS else "cubic"
        if pre["cc"] != a.cc and not getattr(a, "print_config", False):
            print(f"bufsize sim: preset {name} runs {pre['cc']}, which ns-3 does not have: cubic (ns-3's TcpCubic)"
                  " instead; --cc to choose", file=sys.stderr)  # fmt: skip
    return pre | {"name": name}


def search_options(a: argparse.Namespace, flows: int, pre: dict | None = None) -> SearchOptions:
    """The search rule of `pre` (a preset, {} for none) with the command line's over it, as the emulated
    search resolves it (longlived.sweep.search_rule)."""
    if a.max_sample_steal is not None:
        raise UsageError("--max-sample-steal: the twin's samples are simulated; no hypervisor takes their CPU")
    keys = ("target", "relative_to", "samples", "settle_s", "sample_s", "resolution", "max_samples", "alpha",
            "precision", "level", "sample_length", "max_buffer_packets", "tool", "fidelity_s")  # fmt: skip
    given = {k: getattr(a, k) for k in keys} | {"first_guess": not a.no_first_guess, "max_sample_steal": 0.0}
    return SearchOptions(flows=flows, **search_rule(pre or {}, given))


def twin(a: argparse.Namespace, out: Path | None = None, fresh_starts: bool = False) -> Simulated:
    say = quiet_if(getattr(a, "json", False)) or (lambda s: print(s, file=sys.stderr, flush=True))
    return Simulated(out, say, a.start_buffer, fresh_starts)


def cmd_sim_search(a: argparse.Namespace) -> int:
    from bufsize.longlived.search import check_search, run_search

    pre = method(a)
    cfg = sim_config(a, a.flows, a.hosts if a.hosts is not None else min(a.flows, 400), a.seed)
    opts = search_options(a, a.flows, pre)
    check_search(cfg, twin(a), opts)
    resolved = {"preset": pre["name"], "config": cfg.to_dict(), "search": opts, "start_buffer": a.start_buffer,
                "fresh_starts": a.fresh_starts}  # fmt: skip
    if printed_config(a, resolved):
        return 0
    out = result_dir(a)
    result = run_search(cfg, twin(a, out, a.fresh_starts), opts)
    if a.json:
        print(json.dumps(result, indent=1))
    elif out is not None:
        print(f"result written to {out}/result.json")
    return exit_status(result)


def cmd_sim_measure(a: argparse.Namespace) -> int:
    """The emulated measure on the twin: the same options, steps and result keys."""
    from bufsize.longlived.measure import MeasureOptions, check_measure, format_measure, run_measure

    cfg = sim_config(a, a.flows, a.hosts if a.hosts is not None else min(a.flows, 400), a.seed)
    opts = MeasureOptions(a.flows, a.duration, a.settle_s, a.sample_s, a.reference_s, warmup_s=a.warmup_s,
                          fidelity_s=0.0)  # fmt: skip
    check_measure(cfg, twin(a), [a.buffer_packets * FRAME_BYTES], opts, "--buffer-packets")
    resolved = {"config": cfg.to_dict(), "buffer_packets": a.buffer_packets, "options": opts,
                "start_buffer": a.start_buffer}  # fmt: skip
    if printed_config(a, resolved):
        return 0
    out = result_dir(a)
    result = run_measure(cfg, twin(a, out), [a.buffer_packets * FRAME_BYTES], opts)
    print(json.dumps(result, indent=1) if a.json else format_measure(result, out))
    return exit_status(result)


def cmd_sim_sweep(a: argparse.Namespace) -> int:
    from bufsize.scaffold.display import Display
    from bufsize.sim.sweep import SimSweepSpec, check_jobs, default_jobs, twin_runner

    pre = method(a)
    flows = parse_flow_list(a.flows) if a.flows is not None else pre["flows"]
    opts = search_options(a, flows[0], pre)
    search = {k: v for k, v in opts.to_dict().items() if k != "flows"}
    hosts = a.hosts if a.hosts is not None else 400
    spec = SimSweepSpec(flows, a.seeds, hosts, a.rate_mbps, a.rtt_ms, a.cc, a.access_mbps, search,
                        delayed_ack=a.delayed_ack == "on", start_buffer=a.start_buffer,
                        sender_pacing=a.sender_pacing == "on", start_spread_s=a.start_spread_s,
                        attributes=list(a.ns3_attribute))  # fmt: skip
    spec.validate()
    if a.scheduler_host is not None and a.cluster != "slurm":
        raise UsageError("--scheduler-host: only with --cluster slurm (a local cluster listens on loopback)")
    where = Where(a.cluster, a.jobs if a.jobs is not None else default_jobs(a.cluster), a.scheduler_host)
    check_jobs(where.workers)
    if printed_config(a, {"preset": pre["name"], "spec": spec, "cluster": where, "points": spec.points()}):
        return 0
    where.check()
    out = sweep_dir(a)
    assert out is not None
    return swept(a, out, spec, twin_runner(spec, where), Display())


def cmd_sim_util_table(a: argparse.Namespace) -> int:
    """The emulated util-table's rows and columns, each row measured on the twin."""
    from bufsize.cli.commands import table_written
    from bufsize.longlived.measure import MeasureOptions, run_measure
    from bufsize.longlived.utiltable import MAX_MULTIPLE, check_table, run_util_table

    flows = parse_flow_list(a.flows)
    multiples = parse_float_list("--multiples", a.multiples, 0, MAX_MULTIPLE)
    check_table(flows, multiples, a.hosts)  # the emulated table's limits: the same rows and columns
    configs = {n: sim_config(a, n, min(n, a.hosts), a.seed) for n in flows}
    opts = {n: MeasureOptions(n, a.duration, a.settle_s, a.sample_s, a.reference_s, warmup_s=a.warmup_s,
                              fidelity_s=0.0) for n in flows}  # fmt: skip
    for n in flows:
        opts[n].validate(configs[n])
    check_start_buffer(a.start_buffer)
    if printed_config(a, {"multiples": multiples, "configs": configs, "options": opts, "start_buffer": a.start_buffer}):
        return 0
    out = check_out_dir(a.out)
    say = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731

    def measure(n: int, buffers: list[int], d: Path) -> None:
        run_measure(configs[n], Simulated(d, say, a.start_buffer), buffers, opts[n])

    paths = run_util_table(out, flows, multiples, a.hosts, configs.__getitem__, opts.__getitem__, measure, say)
    return table_written(a, out, paths)


def cmd_sim_shortexp(a: argparse.Namespace) -> int:
    from bufsize.cli.shortflows import experiment_spec, series_done
    from bufsize.shortflows.loss import LossSpec
    from bufsize.shortflows.mix import MixSpec
    from bufsize.shortflows.series import run_series
    from bufsize.sim.shortexp import TwinPoints, TwinTcp, check_beside, write_beside

    spec = experiment_spec(a)  # the emulated experiment's own spec and option checks
    assert isinstance(spec, LossSpec | MixSpec)  # the parser offers only these two
    spec.seed = a.seed
    if not 1 <= a.seed <= 2**31:
        raise UsageError(f"--seed {a.seed}: a whole number from 1 to {2**31}")
    spec.validate()
    tcp = TwinTcp(a.iw, a.rto)
    on = TwinPoints(spec, tcp)
    beside = Path(a.beside) if a.beside is not None else None
    if beside is not None:
        check_beside(beside, spec)
    if printed_config(a, {"experiment": a.name, "spec": spec, "tcp": tcp, "points": spec.points()}):
        return 0
    out = check_out_dir(a.out)
    res = run_series(out, spec, on)
    if beside is not None:
        write_beside(out, spec, beside)
    return series_done(a, out, res, beside is not None)
