"""Command-line options shared by several commands, declared once, and their conversion to configs.

Values are checked where they are used (DumbbellConfig.validate, SearchOptions.validate,
MeasureOptions.validate, SweepSpec.validate), before anything is created; this module only
parses and converts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections.abc import Sequence

from bufsize.longlived.presets import PRESETS
from bufsize.monitors.cpu import SAMPLE_STEAL_LIMIT
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.config import (
    DELAY_BACKENDS,
    LOSS_RECOVERIES,
    MAX_HOSTS,
    PACER_DEFAULT,
    SHAPER_CHOICES,
    DumbbellConfig,
    parse_rtts,
)
from bufsize.topologies.errors import UsageError
from bufsize.topologies.units import MAX_BUFFER_BYTES, packets_to_bytes


def group(p: argparse.ArgumentParser, title: str) -> argparse._ArgumentGroup:
    """The parser's option group of that title, made on first use: --help lists options by group."""
    return next((g for g in p._action_groups if g.title == title), None) or p.add_argument_group(title)


def add_path_args(
    p: argparse.ArgumentParser,
    rate: float | None = 62.5,
    rtt: str | None = "87",
    cc: str | None = "reno",
    ccs: Sequence[str] | None = None,
    access_help: str = "access link rate, 0 = unshaped (default 1000)",
) -> None:
    """What both links take: the bottleneck's rate, the RTTs, the congestion control, the access links and
    the receiver's delayed ACKs (None: not given, so a preset's value applies)."""
    g = group(p, "the link")
    by_preset = "the preset's: 62.5 in all but fig11"
    g.add_argument("--rate-mbps", type=float, default=rate, help=f"bottleneck rate C (default {rate or by_preset})")
    g.add_argument(
        "--rtt-ms",
        default=rtt,
        help="RTT per sender host: 87, a list 20,40 (one per host) or a range 20..300 (default "
        f"{rtt or by_preset.replace('62.5', '87')})",
    )
    cc_default = cc or "the preset's: bic or cubic where the kernel has it, reno for theory and fig11"
    cc_help = f"TCP congestion control on every host (default {cc_default})"
    g.add_argument("--cc", default=cc, choices=ccs, help=cc_help)
    g.add_argument("--access-mbps", type=float, default=1000.0, help=access_help)
    g.add_argument(
        "--delayed-ack",
        choices=("on", "off"),
        default="on",
        help="the receiver's delayed ACKs: on (default: every second segment or after 40 ms) or off (every"
        " segment ACKed at once)",
    )


def add_link_args(p: argparse.ArgumentParser, rate: float | None = 62.5, rtt: str | None = "87",
                  cc: str | None = "reno") -> None:  # fmt: skip
    """The bottleneck, the delay and the hosts' TCP: what every command that builds a dumbbell takes."""
    g = group(p, "the link")
    add_path_args(p, rate, rtt, cc)
    g.add_argument(
        "--shaper",
        choices=SHAPER_CHOICES,
        default="auto",
        help="bottleneck: line, the delay line's own queue and clock (paces within a few us; takes a CPU"
        " while busy), or htb or tbf on the switch's port; auto (default) is the line on every kernel and"
        " refuses to run where it cannot (one CPU, --delay-backend netem) instead of falling back"
        " (bench/results/shaper-ab.md)",
    )
    g.add_argument(
        "--burst-bytes",
        type=int,
        help="shaper burst in bytes (default: htb and line 2 ms of the rate, htb 1514 to 15140,"
        " line 3028 to 15140; tbf 3028)",
    )
    g.add_argument(
        "--delay-backend",
        choices=DELAY_BACKENDS,
        default="auto",
        help="propagation delay: netem, the userspace delay line, or auto (the delay line with the line"
        " shaper; with htb or tbf, netem if the kernel has it)",
    )
    g.add_argument(
        "--pacer",
        choices=("on", "off"),
        default="on" if PACER_DEFAULT else "off",
        help="the delay line kicks HTB when each frame is due (htb + delay line only; default "
        f"{'on' if PACER_DEFAULT else 'off'}: bench/results/pacing.md)",
    )
    g.add_argument(
        "--loss-recovery",
        choices=LOSS_RECOVERIES,
        default="linux",
        help="how senders find losses: linux (default: the kernel's RACK and tail-loss probes) or dupack"
        " (both off: three duplicate ACKs or the timeout, as ns-2 and the ns-3 twin)",
    )


def add_topology_args(p: argparse.ArgumentParser) -> None:
    g = group(p, "hosts, flows and buffer")
    g.add_argument("--hosts", type=int, default=2, help="sender hosts, 1 to 400 (default 2)")
    add_link_args(p)
    add_buffer_args(p)


def add_buffer_args(p: argparse.ArgumentParser) -> None:
    g = group(p, "hosts, flows and buffer")
    g.add_argument("--buffer-bytes", type=int, help="bottleneck buffer (bfifo limit) in bytes (default: BDP)")
    g.add_argument("--buffer-packets", type=float, help="bottleneck buffer in 1514-byte packets")


def add_flows_arg(p: argparse.ArgumentParser) -> None:
    g = group(p, "hosts, flows and buffer")
    g.add_argument("--flows", type=int, default=10, help="long-lived flows, 1 to 800, split evenly over the hosts")


def add_tool_arg(p: argparse.ArgumentParser) -> None:
    """The long-lived flows' generator and how its senders send (commands that run those flows)."""
    g = group(p, "the traffic")
    g.add_argument("--tool", choices=("iperf", "iperf3"), default="iperf", help="traffic generator (default iperf 2.1)")
    add_sender_pacing_arg(p)


def add_sender_pacing_arg(p: argparse.ArgumentParser) -> None:
    """How senders send (the emulated commands that run flows, and the twin's)."""
    g = group(p, "the traffic")
    g.add_argument(
        "--sender-pacing",
        choices=("on", "off"),
        default="off",
        help="on: each flow paced by its sender's TCP (SO_MAX_PACING_RATE at the access rate turns TCP's own"
        " pacing on, no fq); off (default, the kernel's): a window's segments back to back",
    )


def add_result_args(p: argparse.ArgumentParser, what: str) -> None:
    g = group(p, "output")
    g.add_argument("--out", help=f"directory for {what}")
    g.add_argument("--force", action="store_true", help="overwrite an existing result in --out")
    g.add_argument("--json", action="store_true", help="print the result JSON instead of progress")


def add_search_args(p: argparse.ArgumentParser) -> None:
    g = group(p, "the search")
    g.add_argument("--target", type=float, default=0.99, help="utilization to keep (default 0.99)")
    g.add_argument(
        "--relative-to",
        choices=("reference", "nominal"),
        default="reference",
        help="utilization of the rate measured with a 2-BDP buffer (default) or of the configured rate",
    )
    g.add_argument(
        "--samples",
        type=int,
        help="utilization samples per probe; decisions use the median (default 5, 3 with --precision)",
    )
    g.add_argument("--settle-s", type=float, help="seconds after a buffer change (default: one congestion cycle)")
    g.add_argument("--sample-s", type=float, help="seconds per sample (default: see --sample-length)")
    g.add_argument(
        "--sample-length",
        choices=("measured", "model"),
        help="without --sample-s, each sample spans two loss episodes measured on the queue (default), or one"
        " congestion cycle of the model (the rule of the sign-test sweeps); 20 RTTs to 30 s",
    )
    g.add_argument(
        "--resolution",
        type=float,
        default=0.05,
        help="stop when the bracket is within this fraction of the answer, or one packet (default 0.05)",
    )
    g.add_argument(
        "--max-samples",
        type=int,
        default=0,
        help="sequential test: more samples per probe, up to this many, until the verdict is sure (default 0: off)",
    )
    g.add_argument("--alpha", type=float, default=0.05, help="sequential test's error level (default 0.05)")
    g.add_argument(
        "--precision",
        type=float,
        default=0.0,
        help="stop when the buffer where utilization crosses the target, fitted to every sample so far, is known"
        " to within +- this fraction (e.g. 0.1; 3 samples per probe unless --samples; default 0: off)",
    )
    g.add_argument("--level", type=float, default=0.9, help="confidence of --precision's interval (default 0.9)")
    g.add_argument("--max-buffer-packets", type=int, help="top of the search (default: the 2-BDP calibration buffer)")
    g.add_argument(
        "--no-first-guess", action="store_true", help="do not probe the cc's rule (in a sweep: earlier answers) first"
    )
    add_tool_arg(p)
    g.add_argument("--fidelity-s", type=float, default=2.0, help="seconds of pacing trace at calibration (0: skip)")
    g.add_argument(
        "--max-sample-steal",
        type=float,
        help="retake a sample during which the hypervisor took more than this share of the CPUs, up to twice"
        f" a measurement's samples (default {SAMPLE_STEAL_LIMIT:g}; 0: every sample counts)",
    )


def add_sweep_args(p: argparse.ArgumentParser) -> None:
    """What describes a sweep (bufsize sweep, bufsize remote): a preset, N, runs, the link and the search."""
    g = group(p, "the sweep")
    add_preset_arg(p, "its N and runs; without one, the full preset's method over --flows, one run each")
    g.add_argument("--flows", help="numbers of flows, comma-separated, e.g. 2,10,50,200,800")
    g.add_argument("--runs", type=int, help="searches per N (default: the preset's; 1 without one)")
    g.add_argument("--hosts", type=int, help="most sender hosts; each point uses min(N, this) (default 400)")
    add_link_args(p, rate=None, rtt=None, cc=None)
    g.add_argument(
        "--allow-mixed-shapers",
        action="store_true",
        help="resume a sweep whose finished points used another shaper than this machine would use now"
        " (a local sweep; bufsize remote pins one shaper for every machine)",
    )
    add_search_args(p)
    # None: not given, so a preset's own rule applies (make_spec); --precision 0 still turns it off.
    p.set_defaults(samples=None, resolution=None, max_samples=None, precision=None, target=None)


def add_preset_arg(p: argparse.ArgumentParser, what: str) -> None:
    """--preset: the named methods (longlived/presets.py); none named is the published figures' method."""
    g = group(p, "the method")
    g.add_argument(
        "--preset",
        choices=PRESETS,
        help="the method: quick (the main job), full (the published figures' method: bic or cubic, min(N, 400)"
        " hosts, the precision rule at +-10 %%), theory (reno), fig11 (Appenzeller 2004: 155 Mb/s, spread RTTs, reno,"
        f" 98 %%) or bbr; flags override any part of it ({what})",
    )


def add_print_config_arg(p: argparse.ArgumentParser) -> None:
    g = group(p, "output")
    g.add_argument(
        "--print-config",
        action="store_true",
        help="print the method and configuration this command resolved, as JSON, and exit; builds and runs nothing",
    )


def printed_config(a: argparse.Namespace, resolved: dict) -> bool:
    """With --print-config: print what was resolved (dataclasses as their fields) and say so."""
    if not getattr(a, "print_config", False):
        return False
    print(json.dumps(plain(resolved), indent=1))
    return True


def plain(x: object) -> object:
    """`x` with dataclasses as dicts and paths as text, for JSON."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return plain(dataclasses.asdict(x))
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [plain(v) for v in x]
    return x if isinstance(x, str | int | float | bool | type(None)) else str(x)


LINKS = ("emulated", "simulated")


def add_link_choice(p: argparse.ArgumentParser, cmd: str) -> None:
    """--link, on the commands that run on either link (cli.route_link hands `--link simulated` to the twin)."""
    g = group(p, "the link")
    g.add_argument(
        "--link",
        choices=LINKS,
        default="emulated",
        help="emulated (default): real kernel TCP over the emulated dumbbell, as root; simulated: the same"
        f" experiment on the ns-3 twin, no root (its options: bufsize {cmd} --link simulated --help)",
    )


def add_util_table_args(p: argparse.ArgumentParser) -> None:
    """The util-table's directory, rows (n) and columns (buffers), on either link."""
    g = group(p, "the table")
    g.add_argument("--out", required=True, help="directory (re-running the same command keeps finished rows)")
    g.add_argument("--flows", default="100,200,300,400", help="numbers of flows (default 100,200,300,400)")
    g.add_argument("--multiples", default="0.5,1,2,3", help="buffers as multiples of 1291/sqrt(n) packets")
    g.add_argument("--hosts", type=int, default=400, help="most sender hosts (default 400)")


def add_measure_args(p: argparse.ArgumentParser) -> None:
    g = group(p, "the measurement")
    add_measure_timing_args(p)
    g.add_argument("--fidelity-s", type=float, default=2.0, help="seconds of pacing trace (0: skip)")
    add_tool_arg(p)


def add_measure_timing_args(p: argparse.ArgumentParser) -> None:
    """How a measure spends its time, on either link (the twin's seconds are simulated)."""
    g = group(p, "the measurement")
    g.add_argument("--duration", type=float, default=60.0, help="seconds measured at each buffer (default 60)")
    g.add_argument("--settle-s", type=float, help="seconds after a buffer change before measuring (default: >= 20 RTT)")
    g.add_argument("--sample-s", type=float, default=1.0, help="length of each utilization sample (default 1)")
    g.add_argument(
        "--reference-s", type=float, default=10.0, help="seconds at 2 BDP measuring the link's best (0: skip)"
    )
    g.add_argument(
        "--warmup-s", type=float, help="seconds the flows run before anything is measured (default: one cycle, >= 15)"
    )


def buffer_from_args(buffer_bytes: int | None, buffer_packets: float | None) -> int | None:
    """--buffer-bytes or --buffer-packets (whole frames of 1514 bytes) as bytes; None if neither.

    --buffer-packets is checked here, before it is converted (1e308 packets would overflow);
    --buffer-bytes is checked with every other buffer by DumbbellConfig.validate.
    """
    if buffer_bytes is not None and buffer_packets is not None:
        raise UsageError("give --buffer-bytes or --buffer-packets, not both")
    if buffer_packets is not None:
        most = MAX_BUFFER_BYTES // FRAME_BYTES
        if not (math.isfinite(buffer_packets) and 1 <= buffer_packets <= most):
            raise UsageError(f"--buffer-packets {buffer_packets:g}: must be at least 1 packet and at most {most}")
        return packets_to_bytes(buffer_packets)
    return buffer_bytes


def link_config(a: argparse.Namespace, hosts: int, buffer_bytes: int | None = None) -> DumbbellConfig:
    """A validated dumbbell of `hosts` senders from the link options."""
    cfg = DumbbellConfig(
        hosts=hosts,
        rate_mbps=a.rate_mbps,
        rtt_ms=parse_rtts(a.rtt_ms, hosts),
        buffer_bytes=buffer_bytes,
        shaper=a.shaper,
        delay_backend=a.delay_backend,
        burst_bytes=a.burst_bytes,
        pacer=a.pacer == "on",
        cc=a.cc,
        access_mbps=a.access_mbps,
        loss_recovery=a.loss_recovery,
        delayed_ack=a.delayed_ack == "on",
        # Only the commands that run long-lived flows offer it (add_tool_arg); the others send unpaced.
        sender_pacing=getattr(a, "sender_pacing", "off") == "on",
    )
    cfg.validate()
    return cfg


def config_from_args(a: argparse.Namespace) -> DumbbellConfig:
    if not 1 <= a.hosts <= MAX_HOSTS:  # before parse_rtts, which would spread a range over them
        raise UsageError(f"--hosts {a.hosts}: must be a whole number from 1 to {MAX_HOSTS}")
    return link_config(a, a.hosts, buffer_from_args(a.buffer_bytes, a.buffer_packets))
