"""`bufsize shell`: Mininet's CLI on a measured dumbbell, plus commands for the bottleneck.

Everything Mininet's CLI does works on the dumbbell's nodes (h1..hN, s1, r1, d1 with the delay
line): `h1 ping -c 2 r1`, `r1 iperf -s &`, `nodes`, `net`, `py net.get('h1').IP()`. Added:
`buffer` (show or change the bottleneck buffer in place) and `monitor` (the bottleneck's rate,
queue and drops, sampled every 0.1 s). Like Mininet's CLI it reads commands from standard input
when that is not a terminal. The dumbbell is torn down on exit, Ctrl-D, an error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from bufsize.cli import options
from bufsize.mininet.adapter import import_mininet, make_view
from bufsize.monitors.live import MONITOR_EVERY_S, monitor
from bufsize.topologies.config import DumbbellConfig
from bufsize.topologies.dumbbell import Dumbbell
from bufsize.topologies.errors import UsageError
from bufsize.topologies.machine import require_root
from bufsize.topologies.units import MAX_BUFFER_BYTES, bytes_to_packets, check_number, packets_to_bytes

MAX_MONITOR_S = 3600.0


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `shell` to the subcommands of the bufsize parser."""
    s = sub.add_parser("shell", help="Mininet's CLI on a measured dumbbell (buffer and monitor commands added)")
    options.add_topology_args(s)
    s.set_defaults(func=run_from_args)
    return s


def parse_buffer(words: list[str]) -> int:
    """`buffer 100` (packets) or `buffer 150000 bytes` -> bytes; UsageError with the typed text."""
    text = " ".join(words)
    try:
        if len(words) == 1:
            packets = float(words[0])
            check_number("buffer", packets, 1, bytes_to_packets(MAX_BUFFER_BYTES), lo_inclusive=True)
            return packets_to_bytes(packets)
        if len(words) == 2 and words[1] in ("b", "bytes", "B"):
            n = int(words[0])
            check_number("buffer", n, 1, MAX_BUFFER_BYTES, lo_inclusive=True)
            return n
    except ValueError:
        pass
    raise UsageError(f"buffer {text}: give packets (buffer 100) or bytes (buffer 150000 bytes)")


def make_cli_class() -> type:
    mn = import_mininet()
    mn.log.setLogLevel("output")  # the CLI prints command output at this level; the default prints nothing
    for handler in mn.log.lg.handlers:
        handler.setStream(sys.stdout)  # a command's output is the shell's output (Mininet logs to stderr)

    class DumbbellCLI(mn.cli.CLI):
        prompt = "bufsize> "

        def __init__(self, view: Any, stdin: TextIO = sys.stdin, **kw: Any) -> None:
            self.dumbbell: Dumbbell = view.dumbbell
            super().__init__(view, stdin=stdin, **kw)

        def do_buffer(self, line: str) -> None:
            """buffer: print the bottleneck buffer; buffer P: set it to P packets; buffer B bytes."""
            net = self.dumbbell
            if line.strip():
                try:
                    net.set_buffer(parse_buffer(line.split()))
                except UsageError as e:
                    print(f"*** {e}", flush=True)
                    return
            b = net.buffer_bytes
            print(f"bottleneck buffer: {b} bytes ({bytes_to_packets(b):g} packets)", flush=True)

        def do_monitor(self, line: str) -> None:
            """monitor [S]: rate, queue and drops at the bottleneck every 0.1 s for S seconds (default 1)."""
            try:
                seconds = float(line) if line.strip() else 1.0
                check_number("monitor", seconds, MONITOR_EVERY_S, MAX_MONITOR_S, lo_inclusive=True)
            except (ValueError, UsageError):
                print(f"*** monitor {line.strip()}: give seconds, {MONITOR_EVERY_S:g} to {MAX_MONITOR_S:g}")
                return
            monitor(self.dumbbell, seconds, sys.stdout)

    return DumbbellCLI


def run_shell(cfg: DumbbellConfig, backend: str, stdin: TextIO = sys.stdin) -> int:
    cli_class = make_cli_class()  # Mininet missing: a MachineError before anything is built
    print(f"building a dumbbell of {cfg.hosts} hosts ({backend} delay) ...", file=sys.stderr, flush=True)
    with Dumbbell(cfg, backend) as net, make_view(net) as view:
        where = "d1" if net.bottleneck.ns == net.delay_ns else "s1"  # the line shaper is the delay line's
        print(
            f"nodes: {' '.join(view.keys())}; the bottleneck is {where}'s {net.bottleneck.dev} "
            f"({cfg.rate_mbps:g} Mb/s {net.cfg.shaper}, buffer {net.buffer_bytes} B); 'help' lists commands",
            flush=True,
        )
        cli_class(view, stdin=stdin)
    return 0


def run_from_args(a: argparse.Namespace) -> int:
    cfg = options.config_from_args(a)
    require_root()
    return run_shell(cfg, cfg.backend())
