"""The `bufsize` command."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import NoReturn

from buffersizing.config import DELAY_BACKENDS, SHAPERS, DumbbellConfig, buffer_from_args, parse_rtts
from buffersizing.errors import MachineError, RunError, UsageError


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
        help="bottleneck shaper (default htb: it paced the most evenly in bench/results/shaper-fidelity.md)",
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


def cmd_clean(a: argparse.Namespace) -> int:
    from buffersizing.runstate import clean_leftovers

    require_root()
    removed = clean_leftovers()
    for r in removed:
        print(f"removed {r}")
    print("nothing to clean" if not removed else f"cleaned {len(removed)} item(s)")
    return 0


def cmd_quick(a: argparse.Namespace) -> int:
    """The main job: check the machine, then verify the paper's dumbbell and a spread of RTTs."""
    from buffersizing.capabilities import format_report, probe
    from buffersizing.verify import format_summary

    require_root()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    caps = probe()
    print(format_report(caps))
    (out / "doctor.json").write_text(json.dumps(caps.to_dict(), indent=1) + "\n")
    if caps.problems:
        return 1
    ok = True
    runs = {
        "verify-87ms": DumbbellConfig(hosts=2, rtt_ms=[87.0, 87.0]),
        "verify-20-300ms": DumbbellConfig(hosts=8, rtt_ms=parse_rtts("20..300", 8)),
    }
    for name, cfg in runs.items():
        print(f"\n== {name}: {cfg.hosts} hosts, RTT {cfg.rtt_ms[0]:g}..{cfg.rtt_ms[-1]:g} ms, {cfg.rate_mbps} Mb/s")
        s = run_verify(cfg, duration=5.0)
        (out / f"{name}.json").write_text(json.dumps(s | {"config": cfg.to_dict()}, indent=1) + "\n")
        print(format_summary(s))
        ok &= s["ok"]
    print(f"\nresults written to {out}/")
    return 0 if ok else 1


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

    c = sub.add_parser("clean", help="remove what a killed run left behind (only the toolkit's own)")
    c.set_defaults(func=cmd_clean)

    q = sub.add_parser("quick", help="the main job of ./setup.sh quick")
    q.add_argument("--out", default="results/quick")
    q.set_defaults(func=cmd_quick)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGHUP, _on_signal)
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
