"""The `bufsize` command."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import NoReturn

from buffersizing import FRAME_BYTES
from buffersizing.config import DELAY_BACKENDS, SHAPERS, DumbbellConfig, buffer_from_args, parse_rtts
from buffersizing.errors import MachineError, RunError, UsageError
from buffersizing.minbuffer import SearchOptions
from buffersizing.presets import PRESETS
from buffersizing.sweep import SweepSpec


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line naming the problem, exit status 2 (argparse would print the whole usage too).
        self.exit(2, f"{self.prog}: {message}\n")


def _on_signal(signum: int, _frame: object) -> None:
    # Turn SIGTERM/SIGHUP into an exception so every `with Dumbbell(...)` block tears down.
    raise SystemExit(128 + signum)


def add_topology_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hosts", type=int, default=2, help="sender hosts, 1 to 400 (default 2)")
    p.add_argument("--rate-mbps", type=float, default=62.5, help="bottleneck rate C (default 62.5)")
    p.add_argument(
        "--rtt-ms",
        default="87",
        help="round-trip time per sender host: 87, a list 20,40 (one per host) or a range 20..300",
    )
    p.add_argument("--buffer-bytes", type=int, help="bottleneck buffer (bfifo limit) in bytes (default: BDP)")
    p.add_argument("--buffer-packets", type=float, help="bottleneck buffer in 1514-byte packets")
    p.add_argument(
        "--shaper",
        choices=SHAPERS,
        default="htb",
        help="bottleneck shaper (default htb; pacing of both: bench/results/shaper-fidelity-routed.md)",
    )
    p.add_argument(
        "--delay-backend",
        choices=DELAY_BACKENDS,
        default="auto",
        help="propagation delay: netem, the userspace delay line, or auto (netem if the kernel has it)",
    )
    p.add_argument("--cc", default="reno", help="TCP congestion control on every host (default reno)")
    p.add_argument("--burst-bytes", type=int, help="shaper burst in bytes (default: htb 1514, tbf 3028)")
    p.add_argument("--access-mbps", type=float, default=1000.0, help="access link rate, 0 = unshaped (default 1000)")


def config_from_args(a: argparse.Namespace) -> DumbbellConfig:
    if not 1 <= a.hosts <= 400:
        raise UsageError(f"--hosts {a.hosts}: must be a whole number from 1 to 400")
    cfg = DumbbellConfig(
        hosts=a.hosts,
        rate_mbps=a.rate_mbps,
        rtt_ms=parse_rtts(a.rtt_ms, a.hosts),
        buffer_bytes=buffer_from_args(a.buffer_bytes, a.buffer_packets),
        shaper=a.shaper,
        delay_backend=a.delay_backend,
        burst_bytes=a.burst_bytes,
        cc=a.cc,
        access_mbps=a.access_mbps,
    )
    cfg.validate()
    return cfg


def require_root() -> None:
    import os

    if os.geteuid() != 0:
        raise MachineError("bufsize needs root (network namespaces, qdiscs): run it with sudo")


def cmd_doctor(a: argparse.Namespace) -> int:
    from buffersizing.capabilities import format_report, probe

    caps = probe()
    print(json.dumps(caps.to_dict(), indent=1) if a.json else format_report(caps))
    return 0 if not caps.problems else 1


def resolve(cfg: DumbbellConfig) -> str:
    from buffersizing.capabilities import qdisc_support, resolve_backend
    from topologies.delay import HELPER

    return resolve_backend(cfg.delay_backend, qdisc_support(), HELPER.exists())


def run_verify(cfg: DumbbellConfig, duration: float, rate_test: bool = True) -> dict:
    from buffersizing.verify import measure_rate, measure_rtts, summarize
    from topologies.dumbbell import Dumbbell

    backend = resolve(cfg)
    t0 = time.monotonic()
    with Dumbbell(cfg, backend) as net:
        built = time.monotonic() - t0
        pings = measure_rtts(net)
        rate = measure_rate(net, duration=duration) if rate_test else None
        summary = summarize(net, pings, rate)
    summary["build_seconds"] = round(built, 2)
    summary["wall_seconds"] = round(time.monotonic() - t0, 2)
    return summary


def cmd_verify(a: argparse.Namespace) -> int:
    from buffersizing.verify import format_summary

    cfg = config_from_args(a)
    if a.duration <= 0:
        raise UsageError(f"--duration {a.duration:g}: must be > 0 seconds")
    require_root()
    if not a.json:
        print(f"building a dumbbell of {cfg.hosts} hosts and measuring it ...", file=sys.stderr)
    summary = run_verify(cfg, a.duration, rate_test=not a.no_rate)
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "verify.json").write_text(json.dumps(summary | {"config": cfg.to_dict()}, indent=1) + "\n")
    print(json.dumps(summary, indent=1) if a.json else format_summary(summary))
    return 0 if summary["ok"] else 1


def cmd_flows(a: argparse.Namespace) -> int:
    """Start N long-lived flows, show they are all up and carrying data, then tear down."""
    from buffersizing.traffic import LongFlows, split_flows
    from monitors.counters import InterfaceCounters, rate_mbps
    from topologies.dumbbell import BOTTLENECK_DEV, Dumbbell

    cfg = config_from_args(a)
    split_flows(a.flows, cfg.hosts)  # validates --flows before anything is built
    if a.duration <= 0:
        raise UsageError(f"--duration {a.duration:g}: must be > 0 seconds")
    require_root()
    backend = resolve(cfg)

    def progress(n: int, want: int) -> None:
        if not a.json:
            print(f"\r  established {n}/{want}", end="", file=sys.stderr, flush=True)

    t0 = time.monotonic()
    with Dumbbell(cfg, backend) as net, LongFlows(net, a.flows, a.tool) as flows:
        started = flows.start_info
        assert started is not None
        if not a.json:
            print(file=sys.stderr)
        counters = InterfaceCounters(net.switch_ns, BOTTLENECK_DEV)
        try:
            first = counters.read()
            time.sleep(a.duration)
            last = counters.read()
        finally:
            counters.close()
        flows.check()
        ccs = flows.congestion_controls()
    summary = {
        "flows": a.flows,
        "hosts": cfg.hosts,
        "tool": a.tool,
        "cc": cfg.cc,
        "congestion_controls_seen": ccs,
        "established": started.established,
        "seconds_to_all_established": started.seconds_to_all_established,
        "held_until_all_up": started.held_until_all_up,
        "bottleneck_rate_mbps": round(rate_mbps(first, last), 3),
        "configured_rate_mbps": cfg.rate_mbps,
        "delay_backend": backend,
        "wall_seconds": round(time.monotonic() - t0, 2),
    }
    if a.json:
        print(json.dumps(summary, indent=1))
    else:
        print(
            f"{summary['established']} of {a.flows} flows established in "
            f"{summary['seconds_to_all_established']} s over {cfg.hosts} hosts ({a.tool}, cc {cfg.cc}: {ccs}); "
            f"{'held until all were up' if summary['held_until_all_up'] else 'NOT held until all were up'}; "
            f"bottleneck {summary['bottleneck_rate_mbps']} of {cfg.rate_mbps:g} Mb/s for {a.duration:g} s"
        )
    return 0


def add_search_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", type=float, default=0.99, help="utilization to keep (default 0.99)")
    p.add_argument(
        "--relative-to",
        choices=("reference", "nominal"),
        default="reference",
        help="utilization of the rate measured with a 2-BDP buffer (default) or of the configured rate",
    )
    p.add_argument("--samples", type=int, default=5, help="utilization samples per probe; decisions use the median")
    p.add_argument("--settle-s", type=float, help="seconds after a buffer change (default: one congestion cycle)")
    p.add_argument("--sample-s", type=float, help="seconds per sample (default: one congestion cycle, 1 to 30 s)")
    p.add_argument(
        "--resolution",
        type=float,
        default=0.05,
        help="stop when the bracket is within this fraction of the answer, or one packet (default 0.05)",
    )
    p.add_argument("--no-first-guess", action="store_true", help="do not probe RTT*C/sqrt(N) first")
    p.add_argument("--tool", choices=("iperf", "iperf3"), default="iperf", help="traffic generator (default iperf 2.1)")
    p.add_argument("--fidelity-s", type=float, default=2.0, help="seconds of pacing trace at calibration (0: skip)")


def search_options(a: argparse.Namespace, flows: int) -> SearchOptions:
    opts = SearchOptions(
        flows=flows,
        target=a.target,
        relative_to=a.relative_to,
        samples=a.samples,
        settle_s=a.settle_s,
        sample_s=a.sample_s,
        resolution=a.resolution,
        first_guess=not a.no_first_guess,
        tool=a.tool,
        fidelity_s=a.fidelity_s,
    )
    opts.validate()
    return opts


def cmd_search(a: argparse.Namespace) -> int:
    from buffersizing.minbuffer import run_search

    if a.buffer_bytes is not None or a.buffer_packets is not None:
        raise UsageError("search chooses the buffer itself: drop --buffer-bytes/--buffer-packets")
    cfg = config_from_args(a)
    opts = search_options(a, a.flows)
    require_root()
    out = Path(a.out) if a.out else None
    if out is not None and (out / "result.json").exists() and not a.force:
        raise UsageError(f"--out {out} already holds a result.json; choose another directory or add --force")
    result = run_search(cfg, resolve(cfg), opts, out, log=(lambda s: None) if a.json else None)
    if a.json:
        print(json.dumps(result, indent=1))
    elif out is not None:
        print(f"result written to {out}/result.json")
    return 0 if result["valid"] else 3


def add_measure_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--duration", type=float, default=60.0, help="seconds measured at each buffer (default 60)")
    p.add_argument("--settle-s", type=float, help="seconds after a buffer change before measuring (default: >= 20 RTT)")
    p.add_argument("--sample-s", type=float, default=1.0, help="length of each utilization sample (default 1)")
    p.add_argument(
        "--reference-s", type=float, default=10.0, help="seconds at 2 BDP measuring the link's best (0: skip)"
    )
    p.add_argument("--fidelity-s", type=float, default=2.0, help="seconds of pacing trace (0: skip)")
    p.add_argument("--tool", choices=("iperf", "iperf3"), default="iperf")


def measure_options(a: argparse.Namespace, flows: int):
    from buffersizing.fixedbuffer import MeasureOptions

    o = MeasureOptions(flows, a.duration, a.settle_s, a.sample_s, a.reference_s, a.fidelity_s, a.tool)
    o.validate()
    return o


def check_out(out: Path | None, force: bool) -> None:
    if out is not None and (out / "result.json").exists() and not force:
        raise UsageError(f"--out {out} already holds a result.json; choose another directory or add --force")


def cmd_measure(a: argparse.Namespace) -> int:
    from buffersizing.fixedbuffer import run_measure

    if a.buffer_bytes is None and a.buffer_packets is None:
        raise UsageError("give the buffer under study: --buffer-packets or --buffer-bytes")
    cfg = config_from_args(a)
    opts = measure_options(a, a.flows)
    out = Path(a.out) if a.out else None
    check_out(out, a.force)
    require_root()
    assert cfg.buffer_bytes is not None
    result = run_measure(cfg, resolve(cfg), [cfg.buffer_bytes], opts, out, log=(lambda s: None) if a.json else None)
    if a.json:
        print(json.dumps(result, indent=1))
    else:
        q = result["queue"]
        print(
            f"utilization {result['utilization']:.2%} of {cfg.rate_mbps:g} Mb/s, loss {result['loss_rate']:.3%}, "
            f"queue mean {q.get('mean_packets')} p99 {q.get('p99_packets')} max {q.get('max_packets')} packets"
            + (
                ""
                if result["valid"]
                else "; FLAGGED: " + ", ".join(k for k, v in result["flags"].items() if v is False)
            )
        )
        if out is not None:
            print(f"result, monitor data and plots written to {out}/")
    return 0 if result["valid"] else 3


def cmd_util_table(a: argparse.Namespace) -> int:
    from buffersizing.fixedbuffer import run_measure
    from buffersizing.utiltable import buffer_packets, point_dir, report

    flows = parse_flow_list(a.flows)
    multiples = parse_float_list("--multiples", a.multiples)
    out = Path(a.out)
    for n in flows:
        if not 1 <= n <= 800:
            raise UsageError(f"--flows {n}: must be from 1 to 800")
    opts_by_n = {n: measure_options(a, n) for n in flows}
    require_root()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    for i, n in enumerate(flows, 1):
        d = point_dir(out, n)
        if (d / "result.json").exists():
            print(f"[{i}/{len(flows)}] n={n}: done earlier, kept", file=sys.stderr)
            continue
        hosts = min(n, a.hosts)
        cfg = DumbbellConfig(
            hosts=hosts,
            rate_mbps=a.rate_mbps,
            rtt_ms=parse_rtts(a.rtt_ms, hosts),
            buffer_bytes=None,
            cc=a.cc,
            shaper=a.shaper,
            burst_bytes=a.burst_bytes,
            delay_backend=a.delay_backend,
        )
        cfg.validate()
        buffers = [buffer_packets(n, m) * FRAME_BYTES for m in multiples]
        print(f"[{i}/{len(flows)}] n={n} ({time.monotonic() - t0:.0f} s so far)", file=sys.stderr)
        run_measure(cfg, resolve(cfg), buffers, opts_by_n[n], d)
    for path in report(out):
        print(f"wrote {path}")
    (out / "wall_seconds.txt").write_text(f"{time.monotonic() - t0:.0f}\n")
    return 0


def parse_float_list(name: str, text: str) -> list[float]:
    try:
        vals = [float(v) for v in text.split(",") if v.strip()]
    except ValueError as e:
        raise UsageError(f"{name} {text}: expected numbers separated by commas, like 0.5,1,2,3") from e
    if not vals or any(v <= 0 for v in vals):
        raise UsageError(f"{name} {text}: expected positive numbers")
    return vals


def parse_flow_list(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError as e:
        raise UsageError(f"--flows {text}: expected whole numbers separated by commas, like 2,10,50") from e


def sweep_spec(a: argparse.Namespace) -> SweepSpec:
    from buffersizing.presets import preset
    from buffersizing.sweep import SweepSpec

    pre = preset(a.preset) if a.preset else {}

    def pick(arg: object, key: str, default: object) -> object:
        return arg if arg is not None else pre.get(key, default)

    search = {
        "target": a.target,
        "relative_to": a.relative_to,
        "samples": pick(a.samples, "samples", 5),
        "settle_s": a.settle_s,
        "sample_s": a.sample_s,
        "resolution": pick(a.resolution, "resolution", 0.05),
        "first_guess": not a.no_first_guess,
        "tool": a.tool,
        "fidelity_s": a.fidelity_s,
    }
    flows = parse_flow_list(a.flows) if a.flows is not None else pre.get("flows")
    if flows is None:
        raise UsageError("give --flows (for example 2,10,50,200,800) or a --preset")
    spec = SweepSpec(
        flows=flows,
        runs=pick(a.runs, "runs", 1),
        max_hosts=pick(a.hosts, "max_hosts", 400),
        rate_mbps=pick(a.rate_mbps, "rate_mbps", 62.5),
        rtt_ms=pick(a.rtt_ms, "rtt_ms", "87"),
        cc=pick(a.cc, "cc", "reno"),
        shaper=a.shaper,
        burst_bytes=a.burst_bytes,
        delay_backend=a.delay_backend,
        access_mbps=a.access_mbps,
        search=search,
        preset=a.preset,
    )
    spec.validate()
    return spec


def cmd_sweep(a: argparse.Namespace) -> int:
    from buffersizing.plot import make_report
    from buffersizing.sweep import run_sweep

    spec = sweep_spec(a)
    require_root()
    out = Path(a.out)
    res = run_sweep(out, spec, resolve(spec.config(spec.flows[0])))
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
    from buffersizing.plot import make_report

    d = Path(a.dir)
    if not d.is_dir():
        raise UsageError(f"{d}: not a directory")
    if (d / "result.json").exists():  # one run (search or measure): redraw its monitor plots from the CSVs
        from monitors.plots import plot_run

        paths = plot_run(d, a.title)
        if not paths:
            raise UsageError(f"{d}: no monitor data (queue.csv, rate.csv, ...) to plot")
        for path in paths:
            print(f"wrote {path}")
        return 0
    for path in make_report(d, a.title):
        print(f"wrote {path}")
    return 0


def cmd_clean(a: argparse.Namespace) -> int:
    from buffersizing.runstate import clean_leftovers

    require_root()
    removed = clean_leftovers()
    for r in removed:
        print(f"removed {r}")
    print("nothing to clean" if not removed else f"cleaned {len(removed)} item(s)")
    return 0


def quick_dir(base: Path, spec: SweepSpec) -> Path:
    """The main job's sweep directory: the latest one if it was cut short with the same settings (so
    re-running resumes it), else a new timestamped one (so a finished run is never overwritten)."""
    from buffersizing.sweep import point_dir

    latest = base / "latest"
    if latest.is_dir() and (latest / "manifest.json").exists():
        try:
            same = json.loads((latest / "manifest.json").read_text())["spec"] == spec.to_dict()
        except (OSError, ValueError, KeyError):
            same = False
        unfinished = any(not (point_dir(latest, n, r) / "result.json").exists() for n, r in spec.points())
        if same and unfinished:
            return latest.resolve()
    d = base / time.strftime("%Y-%m-%d-%H%M%S")
    d.mkdir(parents=True)
    if latest.is_symlink() or not latest.exists():
        latest.unlink(missing_ok=True)
        latest.symlink_to(d.name)
    return d


def cmd_quick(a: argparse.Namespace) -> int:
    """The main job: check the machine, verify the emulated path, then the quick replication sweep."""
    from buffersizing.capabilities import format_report, probe
    from buffersizing.plot import make_report
    from buffersizing.sweep import run_sweep
    from buffersizing.verify import format_summary

    require_root()
    t0 = time.monotonic()
    # The same spec `bufsize sweep --preset quick` builds, so either command can resume the other's run.
    spec = sweep_spec(build_parser().parse_args(["sweep", "--preset", "quick", "--out", a.out]))
    out = quick_dir(Path(a.out), spec)
    caps = probe()
    print(format_report(caps))
    (out / "doctor.json").write_text(json.dumps(caps.to_dict(), indent=1) + "\n")
    if caps.problems:
        return 1
    cfg = DumbbellConfig(hosts=2, rtt_ms=[87.0, 87.0], cc=spec.cc)
    print(f"\n== verify: {cfg.hosts} hosts, RTT 87 ms, {cfg.rate_mbps:g} Mb/s")
    s = run_verify(cfg, duration=5.0)
    (out / "verify.json").write_text(json.dumps(s | {"config": cfg.to_dict()}, indent=1) + "\n")
    print(format_summary(s))
    if not s["ok"]:
        print("the emulated path is not within tolerance; not running the sweep on it", file=sys.stderr)
        return 1
    print(f"\n== quick replication: N = {', '.join(map(str, spec.flows))}, cc {spec.cc}, into {out}/")
    res = run_sweep(out, spec, resolve(cfg))
    paths = make_report(out) if res["finished"] else []
    for path in paths:
        print(f"wrote {path}")
    (out / "wall_seconds.txt").write_text(f"{time.monotonic() - t0:.0f}\n")
    if paths:
        print("\n" + (out / "table.md").read_text())
    print(f"main job finished in {(time.monotonic() - t0) / 60:.1f} min; results in {out}/")
    return 0 if not res["failed"] else 1


def build_parser() -> Parser:
    p = Parser(prog="bufsize", description="Router buffer sizing testbed: real TCP over an emulated dumbbell.")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=Parser)

    d = sub.add_parser("doctor", help="what this machine can do and which delay backend it will use")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=cmd_doctor)

    v = sub.add_parser("verify", help="build a dumbbell, measure RTT and bottleneck rate against the configuration")
    add_topology_args(v)
    v.add_argument("--duration", type=float, default=5.0, help="seconds of rate measurement after warm-up")
    v.add_argument("--no-rate", action="store_true", help="measure RTTs only")
    v.add_argument("--out", help="directory to write verify.json into")
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=cmd_verify)

    f = sub.add_parser("flows", help="start N long-lived TCP flows, check all are established and carrying data")
    add_topology_args(f)
    f.add_argument("--flows", type=int, default=10, help="long-lived flows, 1 to 800, split evenly over the hosts")
    f.add_argument("--tool", choices=("iperf", "iperf3"), default="iperf", help="traffic generator (default iperf 2.1)")
    f.add_argument("--duration", type=float, default=5.0, help="seconds to run once all flows are up")
    f.add_argument("--json", action="store_true")
    f.set_defaults(func=cmd_flows)

    s = sub.add_parser(
        "search",
        help="find the smallest buffer keeping the link at the target utilization (same as binary_search.py)",
    )
    add_topology_args(s)
    s.add_argument("--flows", type=int, default=10, help="long-lived flows, 1 to 800, split evenly over the hosts")
    add_search_args(s)
    s.add_argument("--out", help="directory for result.json and samples.csv")
    s.add_argument("--force", action="store_true", help="overwrite an existing result in --out")
    s.add_argument("--json", action="store_true", help="print the result JSON instead of progress")
    s.set_defaults(func=cmd_search)

    w = sub.add_parser("sweep", help="one search per (N, run) into a resumable sweep directory, then plot it")
    w.add_argument("--preset", choices=PRESETS, help="quick (the main job), full, or theory (reno); flags override")
    w.add_argument("--flows", help="numbers of flows, comma-separated, e.g. 2,10,50,200,800")
    w.add_argument("--runs", type=int, help="searches per N (default 1)")
    w.add_argument("--hosts", type=int, help="most sender hosts; each point uses min(N, this) (default 400)")
    w.add_argument("--rate-mbps", type=float, help="bottleneck rate C (default 62.5)")
    w.add_argument("--rtt-ms", help="RTT, or a range lo..hi spread over each point's hosts (default 87)")
    w.add_argument("--cc", help="congestion control (default reno; presets quick/full: bic, else cubic)")
    w.add_argument("--shaper", choices=SHAPERS, default="htb")
    w.add_argument("--burst-bytes", type=int)
    w.add_argument("--delay-backend", choices=DELAY_BACKENDS, default="auto")
    w.add_argument("--access-mbps", type=float, default=1000.0)
    add_search_args(w)
    w.set_defaults(samples=None, resolution=None)
    w.add_argument("--out", required=True, help="sweep directory; re-running the same command resumes it")
    w.set_defaults(func=cmd_sweep)

    pl = sub.add_parser(
        "plot",
        help="a sweep directory: figure (PNG, PDF) and table (MD, CSV); one run's directory: its monitor plots",
    )
    pl.add_argument("dir")
    pl.add_argument("--title")
    pl.set_defaults(func=cmd_plot)

    m = sub.add_parser("measure", help="utilization, loss and queue at one fixed buffer, after the flows settle")
    add_topology_args(m)
    m.add_argument("--flows", type=int, default=10, help="long-lived flows, 1 to 800, split evenly over the hosts")
    add_measure_args(m)
    m.add_argument("--out", help="directory for result.json, the monitors' CSVs and plots")
    m.add_argument("--force", action="store_true", help="overwrite an existing result in --out")
    m.add_argument("--json", action="store_true", help="print the result JSON")
    m.set_defaults(func=cmd_measure)

    u = sub.add_parser("util-table", help="seed 000 Fig 15: utilization at 0.5-3 x RTT*C/sqrt(n) beside the GSR router")
    u.add_argument("--out", required=True, help="directory (re-running the same command keeps finished rows)")
    u.add_argument("--flows", default="100,200,300,400", help="numbers of flows (default 100,200,300,400)")
    u.add_argument("--multiples", default="0.5,1,2,3", help="buffers as multiples of 1291/sqrt(n) packets")
    u.add_argument("--rate-mbps", type=float, default=155.0, help="bottleneck rate (default 155, OC3)")
    u.add_argument("--rtt-ms", default="80..120", help="RTTs spread over the hosts (default 80..120, mean 100)")
    u.add_argument("--hosts", type=int, default=400, help="most sender hosts (default 400)")
    u.add_argument("--cc", default="reno", help="congestion control (default reno, as the 2004 experiments)")
    u.add_argument("--shaper", choices=SHAPERS, default="htb")
    u.add_argument("--burst-bytes", type=int)
    u.add_argument("--delay-backend", choices=DELAY_BACKENDS, default="auto")
    add_measure_args(u)
    u.set_defaults(func=cmd_util_table)

    from buffersizing import model_cli

    model_cli.add_parser(sub)

    c = sub.add_parser("clean", help="remove what a killed run left behind (only the toolkit's own)")
    c.set_defaults(func=cmd_clean)

    q = sub.add_parser("quick", help="the main job of ./setup.sh quick")
    q.add_argument("--out", default="results/quick", help="a timestamped run directory is made in here")
    q.set_defaults(func=cmd_quick)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGHUP, _on_signal)
    # A shell starts background jobs with SIGINT ignored, and Python then leaves it ignored: Ctrl-C
    # (or kill -INT) must still stop a run and tear it down, wherever it was started from.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return args.func(args)
    except (UsageError, MachineError, RunError) as e:
        print(f"bufsize {args.cmd}: {e}", file=sys.stderr)
        return e.exit_status
    except KeyboardInterrupt:
        print(f"bufsize {args.cmd}: interrupted; everything the run created was removed", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
