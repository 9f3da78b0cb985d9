"""Experiments, theory, reports and the command line of the buffer sizing testbed (top layer)."""

__version__ = "0.1.0"
