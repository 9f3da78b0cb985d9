"""Emulated networks: the dumbbell, its bottleneck shaper and its propagation-delay backends."""
