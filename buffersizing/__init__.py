"""Router buffer sizing testbed: real kernel TCP over an emulated dumbbell."""

__version__ = "0.1.0"

# Frame size that "one packet" means throughout: a full 1500-byte IP packet plus Ethernet header,
# which is what the bottleneck qdisc and interface byte counters see on a veth.
FRAME_BYTES = 1514
