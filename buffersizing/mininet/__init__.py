"""Mininet's view of the toolkit's dumbbell: its nodes for Mininet's CLI and API, and a bottleneck monitor."""
