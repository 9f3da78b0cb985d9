"""The bottleneck qdisc tree: the one place that knows its handles.

    root 1:  tbf rate C burst b          or   htb, class 1:1 rate C ceil C
      `-- 10: bfifo limit BUFFER  (parent 1:1 in both cases)
    htb with the pacer also gets a filter that steals the delay line's kick frames (build_commands).

The bfifo leaf is the buffer under study. Changing it uses `tc qdisc change` on the leaf alone,
so the shaper's token state, its counters and the flows running through it are untouched.
"""

from __future__ import annotations

from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.units import tc_rate

ROOT = "1:"
CLASS = "1:1"
LEAF = "10:"
# Ethertype of the pacer's kick frames (IEEE 802 local experimental): the filter below matches it.
KICK_ETHERTYPE = 0x88B5


def tc_handle(text: str) -> int:
    """'1:1' -> 0x10001, '10:' -> 0x100000 (tc writes handles in hex)."""
    major, _, minor = text.partition(":")
    return int(major, 16) << 16 | (int(minor, 16) if minor else 0)


def build_commands(
    dev: str, shaper: str, rate_mbps: float, buffer_bytes: int, burst_bytes: int, kick_filter: bool = False
) -> list[str]:
    """`tc -batch` lines that build the bottleneck on `dev`; kick_filter (htb only) for the pacer."""
    if shaper == "tbf":
        # TBF's own limit only sizes the default child it creates; ours replaces it right away.
        lines = [
            f"qdisc add dev {dev} root handle {ROOT} tbf rate {tc_rate(rate_mbps)} burst {burst_bytes}"
            f" limit {buffer_bytes}"
        ]
    elif shaper == "htb":
        lines = [
            f"qdisc add dev {dev} root handle {ROOT} htb default 1",
            # quantum of one frame: with a single class it only silences HTB's "quantum is big".
            f"class add dev {dev} parent {ROOT} classid {CLASS} htb rate {tc_rate(rate_mbps)} ceil {tc_rate(rate_mbps)}"
            f" burst {burst_bytes} cburst {burst_bytes} quantum {FRAME_BYTES}",
        ]
    else:
        raise ValueError(f"unknown shaper {shaper}")
    lines.append(f"qdisc add dev {dev} parent {CLASS} handle {LEAF} bfifo limit {buffer_bytes}")
    if kick_filter:
        if shaper != "htb":
            raise ValueError("only htb (classful) can hold the pacer's kick filter")
        # Each kick frame runs the qdisc (HTB dequeues a frame if one is due) and is then stolen by
        # this one-instruction classic BPF program ("ret #4" = TC_ACT_STOLEN): neither queued in
        # the bfifo, nor sent, nor counted as a drop. Other frames do not match the protocol.
        lines.append(
            f"filter add dev {dev} parent {ROOT} protocol {KICK_ETHERTYPE:#06x} prio 1 bpf da bytecode '1,6 0 0 4,'"
        )
    return [line + "\n" for line in lines]


def change_buffer_argv(ns: str, dev: str, buffer_bytes: int) -> list[str]:
    """`tc qdisc change` of the bfifo leaf alone: the shaper's tokens and counters are untouched."""
    return ["tc", "-n", ns, "qdisc", "change", "dev", dev, "parent", CLASS, "handle", LEAF, "bfifo",
            "limit", str(buffer_bytes)]  # fmt: skip
