"""The `bufsize model` subcommand: what the closed-form models predict for a configuration.

Pure arithmetic (bufsize.theory.model), so it needs no root and builds nothing; handy to see what a
sweep point should give before running it.
"""

from __future__ import annotations

import argparse
import json
import math

from bufsize.theory.model import PACKET_BYTES, format_report, predict
from bufsize.topologies.errors import UsageError
from bufsize.topologies.units import check_number

CC_RULES = ("reno", "cubic", "bic", "bbr")


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `model` to the subcommands of the bufsize parser; `run` is its func."""
    m = sub.add_parser("model", help="closed-form predictions (F1..F22 of docs/references.md) for a configuration")
    m.add_argument("--flows", type=int, required=True, help="long-lived flows n, 1 or more")
    m.add_argument("--rate-mbps", type=float, default=62.5, help="bottleneck rate C (default 62.5)")
    m.add_argument(
        "--rtt-ms",
        default="87",
        help="round-trip time, or a comma list of per-flow-group RTTs whose harmonic mean is used (default 87)",
    )
    m.add_argument(
        "--buffer-packets",
        action="append",
        help="buffer to evaluate, repeatable or a comma list (default: RTT*C/sqrt(n) and RTT*C)",
    )
    m.add_argument("--packet-bytes", type=int, default=PACKET_BYTES, help="packet size (default 1500)")
    m.add_argument("--iw", type=int, default=2, help="initial window of short flows in packets (default 2; Linux 10)")
    m.add_argument("--load", type=float, help="short-flow load rho, between 0 and 1: adds the M/G/1 numbers")
    m.add_argument("--flow-packets", type=int, default=14, help="short-flow length in packets (default 14)")
    m.add_argument(
        "--cc",
        choices=CC_RULES,
        default="reno",
        help="congestion control whose buffer rule to add (default reno: Appenzeller 2004's rules only); "
        "cubic, bic and bbr add theirs (bufsize/theory/ccrules.py says where each comes from)",
    )
    m.add_argument("--json", action="store_true", help="print the predictions as JSON")
    m.set_defaults(func=run)
    return m


# Pure arithmetic takes a wider range than the emulator, but every input is finite and bounded so
# that no prediction overflows to inf or divides by a number that underflowed to 0.
MAX_FLOWS = 1_000_000
RATE_MBPS = (0.001, 1e7)  # 1 kb/s to 10 Tb/s
RTT_MS = (0.001, 1e6)  # 1 us to 1000 s
MAX_BUFFER_PACKETS = 1e9
MAX_PACKET_BYTES = 65535  # the largest IP datagram
MAX_IW = 1000
MAX_FLOW_PACKETS = 1_000_000


def _numbers(flag: str, texts: list[str], lo: float, hi: float) -> list[float]:
    """Comma lists (the option may repeat) of numbers each within [lo, hi]; messages quote what was typed."""
    out = []
    for text in texts:
        for part in text.split(","):
            try:
                x = float(part)
            except ValueError:
                raise UsageError(f"{flag} {text}: not a number or a comma list of numbers") from None
            if not (math.isfinite(x) and lo <= x <= hi):
                raise UsageError(f"{flag} {text}: each must be from {lo:g} to {hi:g}")
            out.append(x)
    return out


def _check(a: argparse.Namespace) -> tuple[list[float], list[float] | None]:
    """Validate the arguments; return the RTTs and the buffers (None: the two rules)."""
    check_number("--flows", a.flows, 1, MAX_FLOWS, lo_inclusive=True)
    check_number("--rate-mbps", a.rate_mbps, *RATE_MBPS, lo_inclusive=True)
    rtts = _numbers("--rtt-ms", [a.rtt_ms], *RTT_MS)
    buffers = _numbers("--buffer-packets", a.buffer_packets, 0, MAX_BUFFER_PACKETS) if a.buffer_packets else None
    check_number("--packet-bytes", a.packet_bytes, 1, MAX_PACKET_BYTES, lo_inclusive=True)
    check_number("--iw", a.iw, 1, MAX_IW, lo_inclusive=True)
    check_number("--flow-packets", a.flow_packets, 1, MAX_FLOW_PACKETS, lo_inclusive=True)
    if a.load is not None and not 0 < a.load < 1:
        raise UsageError(f"--load {a.load:g}: must be strictly between 0 and 1 (an M/G/1 queue is unstable at 1)")
    return rtts, buffers


def run(a: argparse.Namespace) -> int:
    rtts, buffers = _check(a)
    p = predict(
        a.flows,
        a.rate_mbps,
        rtts,
        buffers,
        packet_bytes=a.packet_bytes,
        iw=a.iw,
        load=a.load,
        short_flow_packets=a.flow_packets,
        cc=a.cc,
    )
    print(json.dumps(p.to_dict(), indent=1) if a.json else format_report(p))
    return 0
