"""Long-lived flows: traffic, the buffer search and its sweeps, fixed-buffer measurements, the replication figure."""
