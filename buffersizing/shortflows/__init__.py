"""Short-lived flows: workloads, the generator process, runs, the seed figures they measure, plots."""
