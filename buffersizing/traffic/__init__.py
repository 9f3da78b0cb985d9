"""Traffic sources over a dumbbell: long-lived iperf flows and the short-flow generator, each
started and stopped as one object."""
