"""Dask workers on machines reached by SSH, one a machine, and the tunnels they talk through.

The scheduler runs here, on loopback. Each machine's worker is started over that machine's SSH
connection and listens on the machine's own loopback; two forwards inside the same connection join
them: the machine's 127.0.0.1:P to the scheduler here (the worker dials out through it), and
127.0.0.1:L here to the worker there (through it the scheduler fetches a finished point). Nothing
listens beyond loopback on either side, so nothing but SSH carries the traffic between machines,
and a machine behind NAT serves as well as one with a public address.

A worker has one thread and the resource `dumbbell=1`: an emulated point needs the whole machine.
It runs under a terminal of its SSH session, so when the connection goes (this side ended, was
killed, or lost the machine) the terminal hangs up and the worker ends with it; the point's search,
in a session of its own, gets SIGTERM when its worker dies (pointtask.py) and tears its namespaces
down.
"""

from __future__ import annotations

import contextlib
import select
import shlex
import socket
import threading
import time
from typing import Any

from bufsize.remote.ssh import MachineCannotRun, q

LOOPBACK = "127.0.0.1"
RESOURCE = "dumbbell"
REGISTER_TIMEOUT_S = 90  # a worker's imports on a small VM take seconds, not minutes


def pump(a: Any, b: Any) -> None:
    """Copy bytes both ways between a socket and an SSH channel until either side closes."""
    try:
        while True:
            ready, _, _ = select.select([a, b], [], [])
            for src, dst in ((a, b), (b, a)):
                if src in ready:
                    data = src.recv(1 << 16)
                    if not data:
                        return
                    dst.sendall(data)
    except OSError:
        return
    finally:
        for end in (a, b):
            with contextlib.suppress(Exception):
                end.close()


def in_thread(fn: Any, *args: Any) -> None:
    threading.Thread(target=fn, args=args, daemon=True).start()


class MachineWorker:
    """One machine's Dask worker, started over its open Fabric connection `conn` (root, or `sudo`)."""

    def __init__(
        self, conn: Any, label: str, src: str, runs: str, sudo: bool, scheduler_port: int, tls: tuple[str, str]
    ) -> None:
        self.conn, self.label, self.src, self.runs, self.sudo = conn, label, src, runs, sudo
        self.scheduler_port = scheduler_port
        self.cert, self.key = tls  # the sweep's, there
        self.channel: Any = None
        self.listener: socket.socket | None = None

    @property
    def log(self) -> str:
        return f"{self.runs}/worker.log"

    def to_scheduler(self, channel: Any, origin: Any, server: Any) -> None:
        """A connection the worker opened to the machine's end of the scheduler's forward."""
        try:
            sock = socket.create_connection((LOOPBACK, self.scheduler_port), timeout=10)
        except OSError:
            channel.close()
            return
        sock.settimeout(None)
        in_thread(pump, sock, channel)

    def to_worker(self, transport: Any, worker_port: int) -> None:
        """Accept connections here and carry each to the worker's port there."""
        assert self.listener is not None
        while True:
            try:
                sock, peer = self.listener.accept()
            except OSError:
                return  # stop() closed the listener
            try:
                channel = transport.open_channel("direct-tcpip", (LOOPBACK, worker_port), peer)
            except Exception:
                sock.close()
                continue
            in_thread(pump, sock, channel)

    def start(self) -> None:
        transport = self.conn.client.get_transport()
        remote_port = transport.request_port_forward(LOOPBACK, 0, handler=self.to_scheduler)
        python = f"{self.src}/.venv/bin/python"
        find = "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"
        res = self.conn.run(shlex.join([python, "-c", find]), hide=True, warn=True, in_stream=False, timeout=60)
        if res.exited != 0 or not res.stdout.strip().isdigit():
            raise MachineCannotRun(
                f"{self.label}: could not find a free port for its worker: {res.stderr.strip()[-200:]}"
            )
        worker_port = int(res.stdout.strip())  # free a moment ago; taken in between, the worker says so in its log
        self.listener = socket.create_server((LOOPBACK, 0))
        local_port = self.listener.getsockname()[1]
        in_thread(self.to_worker, transport, worker_port)
        argv = [f"{self.src}/.venv/bin/dask", "worker", f"tls://{LOOPBACK}:{remote_port}", "--name", self.label,
                "--nthreads", "1", "--no-nanny", "--no-dashboard", "--memory-limit", "0",
                "--resources", f"{RESOURCE}=1", "--listen-address", f"tls://{LOOPBACK}:{worker_port}",
                "--contact-address", f"tls://{LOOPBACK}:{local_port}", "--death-timeout", "60",
                "--tls-ca-file", self.cert, "--tls-cert", self.cert, "--tls-key", self.key,
                "--local-directory", f"{self.runs}/dask"]  # fmt: skip
        script = f"mkdir -p {q(self.runs)} && cd {q(self.src)} && exec {shlex.join(argv)} >> {q(self.log)} 2>&1"
        command = (["sudo", "-n", "--"] if self.sudo else []) + ["sh", "-c", script]
        self.channel = transport.open_session()
        self.channel.get_pty()  # its hang-up ends the worker when the connection goes
        self.channel.exec_command(shlex.join(command))

    def ended(self) -> bool:
        return self.channel is None or self.channel.exit_status_ready() or self.channel.closed

    def wait_registered(self, client: Any) -> None:
        """Until the scheduler knows this worker; else why not, from the worker's log there."""
        deadline = time.monotonic() + REGISTER_TIMEOUT_S
        while time.monotonic() < deadline and not self.ended():
            if any(w.get("name") == self.label for w in client.scheduler_info()["workers"].values()):
                return
            time.sleep(0.2)
        tail = (["sudo", "-n", "--"] if self.sudo else []) + ["tail", "-n", "3", self.log]  # root's file
        res = self.conn.run(shlex.join(tail), hide=True, warn=True, in_stream=False, timeout=30)
        last = " | ".join(line.strip() for line in res.stdout.strip().splitlines()) or "no log"
        state = "ended" if self.ended() else f"did not reach the scheduler in {REGISTER_TIMEOUT_S} s"
        raise MachineCannotRun(f"{self.label}: its Dask worker {state} ({last}; see {self.log} there)")

    def stop(self) -> None:
        if self.channel is not None:
            with contextlib.suppress(Exception):
                self.channel.close()
        if self.listener is not None:
            with contextlib.suppress(OSError):
                self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() in to_worker; close alone does not
            self.listener.close()
