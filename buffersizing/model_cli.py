"""The `bufsize model` subcommand: what the closed-form models predict for a configuration.

Pure arithmetic (buffersizing.model), so it needs no root and builds nothing; handy to see what a
sweep point should give before running it.
"""

from __future__ import annotations

import argparse
import json
import math

from buffersizing.model import PACKET_BYTES, format_report, predict
from topologies.errors import UsageError


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `model` to the subcommands of the bufsize parser; `run` is its func."""
    m = sub.add_parser("model", help="closed-form predictions (F1..F22 of the seeds checklist) for a configuration")
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
    m.add_argument("--json", action="store_true", help="print the predictions as JSON")
    m.set_defaults(func=run)
    return m


def _numbers(flag: str, texts: list[str]) -> list[float]:
    out = []
    for text in texts:
        for part in text.split(","):
            try:
                x = float(part)
            except ValueError:
                raise UsageError(f"{flag} {text}: not a number or a comma list of numbers") from None
            if not math.isfinite(x):
                raise UsageError(f"{flag} {text}: must be finite")
            out.append(x)
    return out


def _check(a: argparse.Namespace) -> tuple[list[float], list[float] | None]:
    """Validate the arguments; return the RTTs and the buffers (None: the two rules)."""
    if a.flows < 1:
        raise UsageError(f"--flows {a.flows}: must be a whole number, 1 or more")
    if not (math.isfinite(a.rate_mbps) and a.rate_mbps > 0):
        raise UsageError(f"--rate-mbps {a.rate_mbps:g}: must be more than 0")
    rtts = _numbers("--rtt-ms", [a.rtt_ms])
    if min(rtts) <= 0:
        raise UsageError(f"--rtt-ms {a.rtt_ms}: every RTT must be more than 0")
    buffers = _numbers("--buffer-packets", a.buffer_packets) if a.buffer_packets else None
    if buffers is not None and min(buffers) < 0:
        raise UsageError(f"--buffer-packets {','.join(a.buffer_packets)}: buffers cannot be negative")
    if a.packet_bytes < 1:
        raise UsageError(f"--packet-bytes {a.packet_bytes}: must be 1 or more")
    if a.iw < 1:
        raise UsageError(f"--iw {a.iw}: the initial window must be 1 packet or more")
    if a.flow_packets < 1:
        raise UsageError(f"--flow-packets {a.flow_packets}: must be 1 or more")
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
    )
    print(json.dumps(p.to_dict(), indent=1) if a.json else format_report(p))
    return 0
