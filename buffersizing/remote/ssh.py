"""SSH for `bufsize remote`, through Fabric 3: key-based login to a pinned host key, and remote
commands built from argument lists.

Security choices (docs/cloud.md, "Security"):
- Host keys are pinned: only the known_hosts file the user names is loaded, and paramiko's policy
  for a host not in it is RejectPolicy (Fabric's own default is AutoAddPolicy, which trusts any
  key on first sight; it is replaced on every connection, and nothing is ever saved back).
- Keys only: the given private key (or, without one, the ssh agent's keys); no password is ever
  passed, ~/.ssh's default keys are not searched, and no ssh_config file is read (a Host block there
  could add a ProxyCommand or another identity behind the user's back).
- Every remote command is `sh -c SCRIPT` joined with shlex.join; values inside SCRIPT are quoted
  with shlex.quote where they are put in. Nothing the user typed reaches a shell unquoted.
"""

from __future__ import annotations

import shlex
import socket
from pathlib import Path

from fabric import Config, Connection
from invoke.exceptions import CommandTimedOut
from paramiko import AuthenticationException, BadHostKeyException, RejectPolicy, SSHConfig, SSHException
from paramiko.ssh_exception import NoValidConnectionsError

from bufsize.remote.plan import Machine

CONNECT_TIMEOUT_S = 15


class MachineUnreachable(Exception):
    """The machine could not be reached or logged into; the message is one line naming why."""


class MachineCannotRun(Exception):
    """Reached, but it cannot run the toolkit (not root, setup or doctor failed, no namespaces)."""


def connect(machine: Machine, identity: Path | None, known_hosts: Path) -> Connection:
    """A Connection that will only talk to the pinned key and only log in with a key."""
    config = Config(ssh_config=SSHConfig())  # an empty ssh_config: no file is read
    kwargs: dict = {"look_for_keys": False, "allow_agent": identity is None, "banner_timeout": CONNECT_TIMEOUT_S,
                    "auth_timeout": CONNECT_TIMEOUT_S}  # fmt: skip
    if identity is not None:
        kwargs["key_filename"] = [str(identity)]
    c = Connection(
        machine.address,
        user=machine.user,
        port=machine.port,
        config=config,
        connect_timeout=CONNECT_TIMEOUT_S,
        connect_kwargs=kwargs,
    )
    c.client.set_missing_host_key_policy(RejectPolicy())
    # load() into the key table, not load_host_keys(): that would also name the file for saving.
    c.client.get_host_keys().load(str(known_hosts))
    return c


def explain(e: BaseException, machine: Machine, known_hosts: Path) -> str:
    """One line for an SSH failure, saying what to do about it."""
    where = machine.label
    if isinstance(e, BadHostKeyException):
        return (
            f"{where}: its host key does not match the one pinned in {known_hosts} (the machine was "
            "rebuilt, or someone is in between): check its fingerprint out of band before replacing the entry"
        )
    if isinstance(e, AuthenticationException):
        return f"{where}: key authentication as {machine.user} failed (is the public key in its authorized_keys?)"
    if isinstance(e, SSHException) and "not found in known_hosts" in str(e):
        return (
            f"{where}: its host key is not in {known_hosts}; host keys are never trusted on first sight: "
            "add it (ssh-keyscan), after checking its fingerprint against the provider's console"
        )
    if isinstance(e, NoValidConnectionsError | ConnectionError | socket.timeout | TimeoutError):
        return f"{where}: unreachable ({' '.join(str(e).split()) or type(e).__name__})"
    if isinstance(e, CommandTimedOut):
        return f"{where}: a command did not finish in {e.timeout} s"
    return f"{where}: {type(e).__name__}: {' '.join(str(e).split())}"


# What a lost or refused SSH session raises; anything else is a bug and is not swallowed.
SSH_ERRORS = (SSHException, OSError, EOFError, CommandTimedOut)


def sh(c: Connection, script: str, sudo: bool = False, timeout: float | None = None):  # noqa: ANN201
    """Run `script` with sh on the machine (as root through `sudo -n` when logged in as another user).

    warn=True: a non-zero exit is returned, not raised; in_stream=False: nothing is read from this
    process's stdin (it may be a pipe, a terminal, or pytest's capture).
    """
    argv = (["sudo", "-n", "--"] if sudo else []) + ["sh", "-c", script]
    return c.run(shlex.join(argv), hide=True, warn=True, in_stream=False, timeout=timeout)


def q(value: str | Path) -> str:
    return shlex.quote(str(value))
