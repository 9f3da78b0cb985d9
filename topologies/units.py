"""Units and the checks of numbers that every layer shares: packets and bytes, rates for tc."""

from __future__ import annotations

import math

from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.errors import UsageError

MAX_BUFFER_BYTES = 1 << 30  # bfifo limit is a u32; 1 GiB is far beyond any sensible buffer


def check_number(name: str, value: float, lo: float, hi: float, lo_inclusive: bool = False) -> None:
    """Finite and within (lo, hi] (or [lo, hi]); else a one-line UsageError naming the option."""
    ok = math.isfinite(value) and (value >= lo if lo_inclusive else value > lo) and value <= hi
    if not ok:
        low = f">= {lo:g}" if lo_inclusive else f"> {lo:g}"
        raise UsageError(f"{name} {value:g}: must be {low} and <= {hi:g}")


def check_buffer_bytes(buffer_bytes: int, name: str = "buffer") -> int:
    """The one rule for a bottleneck buffer: at least one frame, at most MAX_BUFFER_BYTES."""
    if not FRAME_BYTES <= buffer_bytes <= MAX_BUFFER_BYTES:
        raise UsageError(
            f"{name} {buffer_bytes} bytes: must be at least one packet ({FRAME_BYTES} bytes)"
            f" and at most {MAX_BUFFER_BYTES} bytes"
        )
    return buffer_bytes


def packets_to_bytes(packets: float) -> int:
    return int(round(packets * FRAME_BYTES))


def bytes_to_packets(buffer_bytes: float) -> float:
    return buffer_bytes / FRAME_BYTES


def tc_rate(mbps: float) -> str:
    """A rate as tc reads it, in whole bits per second."""
    return f"{int(round(mbps * 1e6))}bit"


def digits(text: str) -> bool:
    """Whether `text` is a whole number written in ASCII digits only: str.isdigit() also takes '¹' and
    other Unicode digits, which int() then refuses with a traceback."""
    return text.isascii() and text.isdigit()
