"""What every experiment shares: the run's life cycle, its result directory and manifest, cautions,
the project's data files."""
