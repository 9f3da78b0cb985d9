"""Closed-form buffer-sizing models from the seed papers and the `bufsize model` command."""
