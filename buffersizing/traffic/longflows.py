"""Long-lived TCP flows: N real kernel flows from H sender hosts to the receiver, all verified established.

iperf 2.1 (default): one multi-threaded server; one client per host with -P k. Every client gets the
same `--txstart-time` (an absolute time), so connections are made first and no byte of data is
written until that moment; the flows are counted in the receiver's namespace meanwhile, and the run
fails with a clear message if fewer than N are up. This is what the 2012 iperf patch (larger listen
backlog, a sleep after connect) was for; see iperf-patch/README.md.

iperf3 (alternative): one server process per client process and at most 128 streams each, so a host
with more flows gets several clients on several ports. iperf3 cannot hold data after connecting, so
its flows start as they connect (`held_until_all_up` is false unless all connected at once).
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field

from bufsize.topologies.config import pacing_cap_bps
from bufsize.topologies.dumbbell import Dumbbell
from bufsize.topologies.errors import MachineError, RunError, UsageError
from bufsize.topologies.machine import iperf2_version
from bufsize.topologies.proc import describe_exit, run, set_timer_slack, sleep_checked
from bufsize.topologies.sockdiag import TCP_LISTEN, TcpSocket, tcp_sockets

MAX_FLOWS = 800
IPERF3_MAX_STREAMS = 128
# Long enough for any search; the flows are stopped explicitly when the experiment ends.
FOREVER_S = 24 * 3600
QUIET = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
# iperf 2's reporter thread polls: when it has little to report it sleeps a few ms and looks again,
# in every client process and the server. At 400 sender hosts those wake-ups (and their context
# switches) took about half of the traffic CPU (perf, 800 flows, bench/results/shaper-scale.md), and on
# 2 cores the line leaves one CPU for all of it. A timer slack lets each sleep end up to this much
# later, so the kernel wakes them far less often; nothing iperf measures for us is timed by a sleep
# (the bytes are counted at the bottleneck). It is set once every flow is up (LongFlows.start).
IPERF2_TIMER_SLACK_NS = 50_000_000


def hold_s(flows: int, hosts: int, max_rtt_s: float) -> float:
    """Seconds from now to the flows' common first write: a few RTTs, plus starting a client process
    per host (that dominates) and a connection per flow. Measured to all established (the run logs):
    400 flows over 400 hosts 6.4-8.9 s at 87 ms and 9.3-11.8 s at 47..127 ms; 800 over 400 6.4-9.4 s;
    200 over 200 2.3-4.4 s. A smaller allowance per host and flow lets flows start early."""
    return 1.0 + 4 * max_rtt_s + 0.005 * flows + 0.03 * hosts


def split_flows(flows: int, hosts: int) -> list[int]:
    """Flows per host, as even as possible; hosts beyond the flow count get none."""
    if not 1 <= flows <= MAX_FLOWS:
        raise UsageError(f"--flows {flows}: must be a whole number from 1 to {MAX_FLOWS}")
    base, extra = divmod(flows, hosts)
    return [base + (1 if i < extra else 0) for i in range(hosts)]


def check_iperf2() -> None:
    """Refuse an iperf without what the toolkit relies on (2.1: --txstart-time, -Z, many clients)."""
    v = iperf2_version()
    if v is None:
        raise MachineError("iperf 2 is not installed (run ./setup.sh)")
    res = run(["iperf", "--help"], check=False)
    help_text = res.stdout + res.stderr  # iperf 2 prints its help on either stream, depending on version
    if v < (2, 1, 0) or "--txstart-time" not in help_text:
        raise MachineError(
            f"iperf {'.'.join(map(str, v))} lacks --txstart-time/--txdelay-time (need 2.1 or newer); "
            "see iperf-patch/README.md"
        )


def established(net: Dumbbell, ports: list[int]) -> int:
    """TCP connections in ESTABLISHED state on the receiver for the given server ports."""
    wanted = set(ports)
    return sum(1 for s in tcp_sockets(net.receiver_ns) if s.sport in wanted)


@dataclass
class FlowStart:
    flows: int
    tool: str
    cc: str
    established: int
    seconds_to_all_established: float
    held_until_all_up: bool
    per_host: list[int] = field(default_factory=list)


class LongFlows:
    """Start, watch and stop the long-lived flows of one experiment on one dumbbell."""

    def __init__(self, net: Dumbbell, flows: int, tool: str = "iperf", connect_timeout: float | None = None) -> None:
        if tool not in ("iperf", "iperf3"):
            raise UsageError(f"--tool {tool}: must be iperf or iperf3")
        self.net, self.flows, self.tool = net, flows, tool
        self.per_host = split_flows(flows, len(net.hosts))
        # Connecting takes about a round trip per flow plus process start-up; allow generously.
        max_rtt = max(h.rtt_ms for h in net.hosts) / 1000
        self.connect_timeout = connect_timeout or max(15.0, 10 * max_rtt + 0.05 * flows)
        self.servers: list[subprocess.Popen] = []
        self.clients: list[subprocess.Popen] = []
        self.ports: list[int] = []
        self.what: dict[int, str] = {}  # pid -> what it is, for messages
        self.start_info: FlowStart | None = None

    # ---- start --------------------------------------------------------------------------------

    def start(self, progress=None) -> FlowStart:
        t0 = time.monotonic()
        if self.tool == "iperf":
            check_iperf2()
            held = self._start_iperf2()
        else:
            held = self._start_iperf3()
        n = self._wait_established(progress)
        elapsed = time.monotonic() - t0
        if self.tool == "iperf":
            # Only now: set at start, the slack slowed iperf's own start-up (its timed waits) enough
            # that 200 flows were not all up by the common start time (2 of 3 searches flagged).
            for proc in self.servers + self.clients:
                set_timer_slack(proc.pid, IPERF2_TIMER_SLACK_NS)
        if held is not None:
            start_at = held
            held = time.time() < start_at  # everyone was up before the common first write
            # Return only once data is flowing, so measurements can begin right away.
            sleep_checked(max(0.0, start_at - time.time()) + 0.1, self.check_processes)
        self.start_info = FlowStart(
            self.flows, self.tool, self.net.cfg.cc, n, round(elapsed, 2), bool(held), self.per_host
        )
        return self.start_info

    def _start_iperf2(self) -> float:
        net = self.net
        port = net.state.ports().start
        self.ports = [port]
        self.servers.append(net.spawn(net.receiver_ns, self._server_argv(port), "iperf server", **QUIET))
        self.what[self.servers[-1].pid] = "the iperf server"
        self._wait_listening(self.ports)
        # All clients write their first byte at this wall-clock time, which should fall after every
        # connection is up.
        max_rtt = max(h.rtt_ms for h in net.hosts) / 1000
        start_at = time.time() + hold_s(self.flows, len(net.hosts), max_rtt)
        for h, k in zip(net.hosts, self.per_host, strict=True):
            if k == 0:
                continue
            argv = [
                "iperf",
                "-c",
                net.receiver_ip,
                "-p",
                str(port),
                "-P",
                str(k),
                "-t",
                str(FOREVER_S),
                "-Z",
                net.cfg.cc,
                "--txstart-time",
                f"{start_at:.6f}",
                "--connect-retries",
                "5",
                "-i",
                "0",
                *self._pacing_argv(),
            ]
            self.clients.append(net.spawn(h.ns, argv, f"iperf client h{h.index} x{k}", **QUIET))
            self.what[self.clients[-1].pid] = f"iperf client of h{h.index} ({k} flows)"
        return start_at

    def _start_iperf3(self) -> None:
        net = self.net
        jobs = []
        port = net.state.ports().start
        for h, k in zip(net.hosts, self.per_host, strict=True):
            while k > 0:
                streams = min(k, IPERF3_MAX_STREAMS)
                jobs.append((h, port, streams))
                k -= streams
                port += 1
        self.ports = [p for _, p, _ in jobs]
        for _, p, _ in jobs:
            self.servers.append(net.spawn(net.receiver_ns, self._server_argv(p), f"iperf3 server {p}", **QUIET))
        self._wait_listening(self.ports)
        for h, p, streams in jobs:
            argv = [
                "iperf3",
                "-c",
                net.receiver_ip,
                "-p",
                str(p),
                "-P",
                str(streams),
                "-t",
                str(FOREVER_S),
                "-C",
                net.cfg.cc,
                *self._pacing_argv(),
            ]
            self.clients.append(net.spawn(h.ns, argv, f"iperf3 client h{h.index}:{p}", **QUIET))
            self.what[self.clients[-1].pid] = f"iperf3 client of h{h.index} (port {p})"
        return None

    def _pacing_argv(self) -> list[str]:
        """--sender-pacing on: iperf and iperf3 set SO_MAX_PACING_RATE (bits/s here) on each flow's
        socket, which turns on TCP's own pacing (config.pacing_cap_bps)."""
        cfg = self.net.cfg
        return ["--fq-rate", str(pacing_cap_bps(cfg.access_mbps, cfg.rate_mbps))] if cfg.sender_pacing else []

    def _server_argv(self, port: int) -> list[str]:
        if self.tool == "iperf":
            return ["iperf", "-s", "-p", str(port)]
        return ["iperf3", "-s", "-1", "-p", str(port)]  # one client, then exit

    def _wait_listening(self, ports: list[int], timeout: float = 10.0) -> None:
        wanted = set(ports)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len({s.sport for s in tcp_sockets(self.net.receiver_ns, (TCP_LISTEN,))} & wanted) >= len(wanted):
                return
            self._check_processes(self.servers, "server")
            time.sleep(0.05)
        raise RunError(f"the receiver's traffic servers did not listen on {len(ports)} port(s) within {timeout:.0f} s")

    def _wait_established(self, progress=None) -> int:
        # Data connections only: iperf3 also keeps one control connection per client.
        want = self.flows + (len(self.clients) if self.tool == "iperf3" else 0)
        deadline = time.monotonic() + self.connect_timeout
        n = 0
        while time.monotonic() < deadline:
            n = established(self.net, self.ports)
            if progress:
                progress(min(n, want), want)
            if n >= want:
                return self.flows
            self._check_processes(self.servers, "server")
            gone = [p for p in self.clients if p.poll() is not None]
            if gone:
                up = max(0, n - (len(self.clients) if self.tool == "iperf3" else 0))
                raise RunError(
                    f"only {up} of {self.flows} flows established: {len(gone)} client process(es) "
                    f"exited (status {gone[0].returncode}); was the connection refused?"
                )
            time.sleep(0.2)
        up = max(0, n - (len(self.clients) if self.tool == "iperf3" else 0))
        raise RunError(f"only {up} of {self.flows} flows established within {self.connect_timeout:.0f} s")

    def _check_processes(self, procs: list[subprocess.Popen], what: str) -> None:
        dead = [p for p in procs if p.poll() is not None]
        if dead:
            first = dead[0]
            name = self.what.get(first.pid, f"traffic {what} pid {first.pid}")
            others = f" (and {len(dead) - 1} more)" if len(dead) > 1 else ""
            raise RunError(
                f"{name} exited ({describe_exit(first.returncode)}){others}: its flows are gone, "
                "so the link is no longer carrying the configured load"
            )

    # ---- while running ------------------------------------------------------------------------

    def check_processes(self) -> None:
        """Raise if a client or server process has exited (cheap: no fork; for checks inside sleeps)."""
        self._check_processes(self.clients, "client")
        self._check_processes(self.servers, "server")

    def check(self) -> None:
        """Raise if any flow has died: a client process exited or fewer connections are established."""
        self.check_processes()
        extra = len(self.clients) if self.tool == "iperf3" else 0
        n = established(self.net, self.ports) - extra
        if n < self.flows:
            raise RunError(f"{self.flows - n} of {self.flows} flows are no longer established")

    def congestion_controls(self) -> dict[str, int]:
        """Congestion control of every data connection, from sock_diag in the sender namespaces."""
        counts: dict[str, int] = {}
        for sock in self._sender_sockets():
            name = sock.cc or "unknown"
            counts[name] = counts.get(name, 0) + 1
        return counts

    def max_pacing_rates(self) -> list[int | None]:
        """SO_MAX_PACING_RATE (bytes/s) of every data connection as the kernel holds it: 2**64 - 1 is
        none set, so TCP does not pace the flow (--sender-pacing off)."""
        return [s.max_pacing_rate for s in self._sender_sockets()]

    def bytes_acked(self) -> dict[str, int]:
        """Bytes acknowledged so far on every long flow (its sender's address:port)."""
        return {s.local: s.bytes_acked or 0 for s in self._sender_sockets()}

    def _sender_sockets(self) -> list[TcpSocket]:
        """The flows' established connections (with their TCP info) in each sender namespace that has flows."""
        wanted = set(self.ports)
        return [
            sock
            for h, k in zip(self.net.hosts, self.per_host, strict=True)
            if k > 0
            for sock in tcp_sockets(h.ns, info=True)
            if sock.dport in wanted
        ]

    def stop(self, grace: float = 2.0) -> None:
        # One grace period for all: with the path broken (delay line dead) iperf may not act on
        # SIGTERM, and waiting for each in turn made a failing run linger for seconds per host.
        for p in [*self.clients, *self.servers]:
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + grace
        for p in [*self.clients, *self.servers]:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            self.net.state.forget_process(p.pid)
        self.clients, self.servers = [], []

    def __enter__(self) -> LongFlows:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
