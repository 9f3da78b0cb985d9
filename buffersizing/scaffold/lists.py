"""Comma-separated lists of numbers given on the command line, checked entry by entry."""

from __future__ import annotations

import math

from bufsize.topologies.errors import UsageError


def _split_list(name: str, text: str, example: str) -> list[str]:
    """The comma-separated entries of a list option; an empty entry ('1,,2', '2,') is a typo, not a skip."""
    parts = [p.strip() for p in text.split(",")]
    if not all(parts):
        raise UsageError(f"{name} {text}: expected numbers separated by commas, like {example}")
    return parts


def parse_float_list(name: str, text: str, lo: float, hi: float) -> list[float]:
    """Numbers each finite and within (lo, hi]; the message quotes the list as typed."""
    try:
        vals = [float(v) for v in _split_list(name, text, "0.5,1,2,3")]
    except ValueError as e:
        raise UsageError(f"{name} {text}: expected numbers separated by commas, like 0.5,1,2,3") from e
    if not all(math.isfinite(v) and lo < v <= hi for v in vals):
        raise UsageError(f"{name} {text}: each must be more than {lo:g} and at most {hi:g}")
    return vals


def parse_flow_list(text: str, option: str = "--flows") -> list[int]:
    """Whole numbers only; their range is checked where they are used (SweepSpec, utiltable.check_table)."""
    try:
        return [int(v) for v in _split_list(option, text, "2,10,50")]
    except ValueError as e:
        raise UsageError(f"{option} {text}: expected whole numbers separated by commas, like 2,10,50") from e
