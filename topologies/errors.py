"""Errors with the exit status the command line gives them."""


class UsageError(Exception):
    """Bad input from the user: one line naming the value and what is allowed; exit status 2."""

    exit_status = 2


class MachineError(Exception):
    """The machine cannot do what was asked (missing qdisc, tool, privilege); exit status 1."""

    exit_status = 1


class RunError(Exception):
    """Something failed part-way through a run (a command, a process, a measurement); exit status 1."""

    exit_status = 1
