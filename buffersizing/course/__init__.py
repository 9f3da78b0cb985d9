"""The course kit: the example script and the checker of a student's results."""
