"""The emulation core: processes, namespaces, what a run created and its cleanup, sysctls, machine
probing, the topology description, shaper, delay backends, the dumbbell and its bottleneck.

Nothing here imports `monitors` or `buffersizing`: they are built on this layer, never under it.
"""

# Frame size that "one packet" means throughout: a full 1500-byte IP packet plus Ethernet header,
# which is what the bottleneck qdisc and interface byte counters see on a veth.
FRAME_BYTES = 1514
