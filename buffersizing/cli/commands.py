"""What each `bufsize` command does once its arguments are parsed (the parser is cli.py): validate
what the arguments alone can say, then require root, then run. Each returns the exit status; with
--json a command prints one JSON document on stdout and its progress on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from bufsize.cli import options
from bufsize.longlived.measure import MeasureOptions
from bufsize.scaffold import lists
from bufsize.scaffold.display import Display
from bufsize.scaffold.experiment import Say, stderr_say
from bufsize.scaffold.projectfiles import QUICK_REFERENCE_DIR
from bufsize.scaffold.resultdir import check_out_dir, exit_status, table_rows
from bufsize.scaffold.runs import Emulated
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.config import DumbbellConfig
from bufsize.topologies.errors import UsageError
from bufsize.topologies.machine import delay_backend, require_root

if TYPE_CHECKING:
    from bufsize.longlived.search import SearchOptions
    from bufsize.longlived.sweep import PointRunner, SweepSpecLike


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
    from bufsize.longlived.presets import format_preset_methods, preset_methods
    from bufsize.monitors.cpu import steal_since_boot, steal_under_wakeups
    from bufsize.scaffold.cautions import idle_report, steal_report
    from bufsize.topologies.machine import cpuidle_driver, format_report, halt_poll_ns, probe

    caps = probe()
    methods = preset_methods(caps.qdiscs, caps.delayline_built)
    # Sampled here, not in probe(): two seconds of load on every core are the doctor's to spend, not every run's.
    steal = {
        "under_load": round(steal_under_wakeups(2.0).steal, 4),
        "load_s": 2.0,
        "since_boot": round(steal_since_boot(), 4),
    }
    idle = {"driver": cpuidle_driver(), "halt_poll_ns": halt_poll_ns()}
    if a.json:
        print(json.dumps(caps.to_dict() | {"presets": methods, "steal": steal, "idle": idle}, indent=1))
    else:
        lines = [idle_report(idle), *steal_report(steal).splitlines()]
        print(format_report(caps, lines) + "\n" + format_preset_methods(methods))
    return 0 if not caps.problems else 1


def cmd_verify(a: argparse.Namespace) -> int:
    from bufsize.longlived.verify import check_duration, format_summary, run_verify

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
    from bufsize.longlived.flows import check_duration, format_flows, run_flows
    from bufsize.traffic.longflows import split_flows

    cfg = options.config_from_args(a)
    split_flows(a.flows, cfg.hosts)
    check_duration(a.duration)
    require_root()
    s = run_flows(cfg, cfg.backend(), a.flows, a.tool, a.duration, quiet_if(a.json) or stderr_say)
    print(json.dumps(s, indent=1) if a.json else format_flows(s, a.duration))
    return 0


def resolved_config(cfg: DumbbellConfig, opts: SearchOptions) -> dict:
    """What a search would run, for `--print-config`: every field of the link and of the search, as
    resolved from the options (one RTT as a number when every host has it; None: decided at run time,
    such as the shaper's burst or the settle and sample times, which follow the dynamics)."""
    rtt = cfg.rtt_ms[0] if len(set(cfg.rtt_ms)) == 1 else cfg.rtt_ms
    link = asdict(cfg) | {"rtt_ms": rtt, "bdp_packets": round(cfg.bdp_bytes / FRAME_BYTES, 1)}
    link.pop("buffer_bytes")  # the search chooses the buffer
    return {"flows": opts.flows, **link, **{k: v for k, v in asdict(opts).items() if k != "flows"}}


def cmd_search(a: argparse.Namespace) -> int:
    from bufsize.longlived.search import run_search
    from bufsize.longlived.sweep import spec_from_args

    if a.buffer_bytes is not None or a.buffer_packets is not None:
        raise UsageError("search chooses the buffer itself: drop --buffer-bytes/--buffer-packets")
    spec = spec_from_args(a, [a.flows])  # one point of a sweep: the same method, checked the same way
    cfg, opts = spec.config(a.flows), spec.options(a.flows)
    if options.printed_config(a, {"preset": spec.preset, **resolved_config(cfg, opts)}):
        return 0
    require_root()
    out = result_dir(a)
    if not a.json:
        print(f"method: preset {spec.preset}{'' if a.preset else ' (the published figures; --preset to choose)'},"
              " with the flags given over it (--print-config shows all)", file=sys.stderr)  # fmt: skip
    result = run_search(cfg, Emulated(cfg.backend(), out, quiet_if(a.json)), opts)
    if a.json:
        print(json.dumps(result, indent=1))
    elif out is not None:
        print(f"result written to {out}/result.json")
    return exit_status(result)


def measure_options(a: argparse.Namespace, flows: int, cfg: DumbbellConfig) -> MeasureOptions:
    o = MeasureOptions(
        flows, a.duration, a.settle_s, a.sample_s, a.reference_s, a.fidelity_s, a.tool, warmup_s=a.warmup_s
    )
    o.validate(cfg)
    return o


def cmd_measure(a: argparse.Namespace) -> int:
    from bufsize.longlived.measure import format_measure, run_measure

    if a.buffer_bytes is None and a.buffer_packets is None:
        raise UsageError("give the buffer under study: --buffer-packets or --buffer-bytes")
    cfg = options.config_from_args(a)
    opts = measure_options(a, a.flows, cfg)
    if options.printed_config(a, {"config": cfg, "options": opts}):
        return 0
    require_root()
    out = result_dir(a)
    assert cfg.buffer_bytes is not None
    result = run_measure(cfg, Emulated(cfg.backend(), out, quiet_if(a.json)), [cfg.buffer_bytes], opts)
    print(json.dumps(result, indent=1) if a.json else format_measure(result, out))
    return exit_status(result)


def cmd_util_table(a: argparse.Namespace) -> int:
    from bufsize.longlived.utiltable import MAX_MULTIPLE, check_table, emulated_rows, run_util_table

    flows = lists.parse_flow_list(a.flows)
    multiples = lists.parse_float_list("--multiples", a.multiples, 0, MAX_MULTIPLE)
    check_table(flows, multiples, a.hosts)
    configs = {n: options.link_config(a, min(n, a.hosts)) for n in flows}
    opts = {n: measure_options(a, n, configs[n]) for n in flows}
    if options.printed_config(a, {"multiples": multiples, "configs": configs, "options": opts}):
        return 0
    require_root()
    out = check_out_dir(a.out)  # before the backend probe builds its namespace
    backend = delay_backend(a.delay_backend, a.shaper)
    measure = emulated_rows(configs.__getitem__, opts.__getitem__, backend, stderr_say)
    paths = run_util_table(out, flows, multiples, a.hosts, configs.__getitem__, opts.__getitem__, measure, stderr_say)
    return table_written(a, out, paths)


def table_written(a: argparse.Namespace, out: Path, paths: list[Path]) -> int:
    """What util-table prints when its table is written, on either link."""
    if a.json:
        print(json.dumps({"out": str(out), "wrote": [str(p) for p in paths], "table": table_rows(out)}, indent=1))
    for path in [] if a.json else paths:
        print(f"wrote {path}")
    return 0


def sweep_outcome(out: Path, res: dict, paths: list[Path]) -> dict:
    """What --json prints after a sweep: its directory, the points' outcome, and the table's rows."""
    return {"out": str(out), **res, "wrote": [str(p) for p in paths], "table": table_rows(out) if paths else []}


def cmd_sweep(a: argparse.Namespace) -> int:
    from bufsize.longlived.sweep import emulated_runner, format_plan, parse_points, plan, spec_from_args

    spec = spec_from_args(a)
    only = parse_points(a.points, spec) if a.points is not None else None
    if options.printed_config(a, {"spec": spec, "points": only or spec.points()}):
        return 0
    out = sweep_dir(a, create=not a.dry_run)
    if a.dry_run:
        backend = delay_backend(spec.delay_backend, spec.shaper) if os.geteuid() == 0 else None
        p = plan(out, spec, backend, only)
        print(json.dumps(p, indent=1) if a.json else format_plan(p))
        return 0
    require_root()
    backend = delay_backend(spec.delay_backend, spec.shaper)
    say = Display()  # a live bar on a terminal, lines elsewhere
    assert out is not None  # sweep_dir requires --out but for --dry-run
    return swept(a, out, spec, emulated_runner(out, spec, backend, say, a.allow_mixed_shapers), say, only)


def sweep_dir(a: argparse.Namespace, create: bool = True) -> Path | None:
    """A sweep's --out, needed but for --dry-run."""
    if a.out is None and not getattr(a, "dry_run", False):
        raise UsageError("give --out: the sweep directory (re-running the same command resumes it)")
    return check_out_dir(a.out, create=create) if a.out is not None else None


def swept(a: argparse.Namespace, out: Path, spec: SweepSpecLike, runner: PointRunner, say: Say,
          only: list[tuple[int, int]] | None = None) -> int:  # fmt: skip
    """A sweep on either link (longlived/sweep.py run_sweep), then its figure and table, and what failed."""
    from bufsize.longlived.report import make_report
    from bufsize.longlived.sweep import run_sweep

    res = run_sweep(out, spec, runner, say, only)
    paths = make_report(out) if res["finished"] else []
    if getattr(a, "json", False):
        print(json.dumps(sweep_outcome(out, res, paths), indent=1))
    for path in [] if getattr(a, "json", False) else paths:
        print(f"wrote {path}")
    if res["failed"]:
        print(f"{len(res['failed'])} point(s) failed; re-run the same command to retry them:", file=sys.stderr)
        for f in res["failed"]:
            print(f"  {f}", file=sys.stderr)
        return 1
    return 0


def cmd_plot(a: argparse.Namespace) -> int:
    from bufsize.cli.plot import plot_dir

    curve_flows = lists.parse_flow_list(a.curves, "--curves") if a.curves is not None else None
    paths = plot_dir(a.dir, a.title, a.with_sim, a.beside, a.out, in_place=a.force, curve_flows=curve_flows)
    print(
        json.dumps({"wrote": [str(p) for p in paths]}, indent=1) if a.json else "\n".join(f"wrote {p}" for p in paths)
    )
    return 0


def cmd_clean(a: argparse.Namespace) -> int:
    from bufsize.topologies.cleanup import clean_leftovers

    require_root()
    report = clean_leftovers()  # refuses an unsafe state directory (MachineError) before anything
    print(json.dumps({"removed": report.removed, "refused": report.refused}, indent=1) if a.json else report.summary())
    print("".join(f"bufsize clean: {r}\n" for r in report.refused), end="", file=sys.stderr)
    return 1 if report.refused else 0


def cmd_quick(a: argparse.Namespace) -> int:
    from bufsize.longlived.quick import plan_quick, quick_spec, run_quick

    if options.printed_config(a, {"spec": quick_spec(), "points": quick_spec().points()}):
        return 0
    if a.dry_run:
        p = plan_quick(a.out, QUICK_REFERENCE_DIR)
        print(json.dumps(p, indent=1) if a.json else p["text"])
        return 0
    require_root()
    if not a.json:
        return run_quick(a.out)[0]
    with contextlib.redirect_stdout(sys.stderr):  # the report goes to stderr, the outcome alone to stdout
        code, out = run_quick(a.out)
    print(json.dumps({"status": code, "out": str(out) if out else None, "table": table_rows(out)}, indent=1))
    return code


def cmd_validate(a: argparse.Namespace) -> int:
    """Check results against the schema: one line per problem on stdout, 0 when there is none, 1 else."""
    from bufsize.scaffold import schema

    checked, found, migrated = 0, [], 0
    for given in a.dirs:
        if not str(given).strip():
            raise UsageError("validate: an empty path; give a results directory or file")
        root = Path(given)
        if not root.exists():
            raise UsageError(f"validate {given}: no such file or directory")
        if a.migrate:
            for path in schema.files_under(root):
                try:
                    migrated += schema.migrate_file(path)
                except (OSError, ValueError) as e:
                    found.append(f"{path}: (file): not migrated: {e}")
        n, problems = schema.check_tree(root)
        checked += n
        found += problems
    for line in found:
        print(line)
    what = f"{checked} files checked against schema version {schema.SCHEMA_VERSION}"
    what += f", {migrated} migrated" if a.migrate else ""
    print(f"{what}: {len(found)} problems" if found else f"{what}: all valid", file=sys.stderr)
    if checked == 0:
        print("no result.json or manifest.json found", file=sys.stderr)
        return 1
    return 1 if found else 0


def cmd_report(a: argparse.Namespace) -> int:
    """docs/results.md from the committed sweeps, or with --check whether the committed page is current."""
    from bufsize.longlived.resultspage import results_page
    from bufsize.scaffold.projectfiles import COMMITTED_RESULTS_DIR
    from bufsize.topologies.safefiles import write_atomic

    repo = COMMITTED_RESULTS_DIR.parent
    if not (repo / "docs").is_dir():
        raise UsageError("report: run it from a checkout of the repository (the committed results and docs/)")
    if a.out is not None and not a.out.strip():
        raise UsageError("report --out: an empty path; give the page's file")
    page = results_page(repo)
    out = Path(a.out) if a.out else repo / "docs" / "results.md"
    if a.check:
        current = out.read_text() if out.is_file() else None
        if current != page:
            print(
                f"bufsize report: {out} is not what the committed results give; run `bufsize report`", file=sys.stderr
            )
            return 1
        print(f"{out}: current")
        return 0
    write_atomic(out, page)
    print(f"wrote {out}")
    return 0
