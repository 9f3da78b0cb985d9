"""The short-flow generator: one process, one event loop, real kernel TCP from every sender host.

Started by bufsize.traffic.shortflows inside the receiver's namespace:

    python -m bufsize.traffic.generator SPEC.json

It listens on the receiver, then starts transfers from the sender hosts' namespaces (each client
socket is made in its host's namespace: bufsize.topologies.netns.NamespaceSockets) as the workload says.
A transfer opens a connection, sends a 16-byte header (its id and size) and the rest of its bytes,
and waits for the receiver to close. Its record comes from what the kernel and the receiver saw:
- start: just before connect(), so the SYN is its first packet (Appenzeller 2004's AFCT starts there);
- end: when the receiver has read the last byte (AFCT ends "when the last packet reaches the
  destination"); both are CLOCK_MONOTONIC, the clock of the queue monitor;
- initial window and MSS: TCP_INFO right after the handshake; retransmissions: TCP_INFO once the
  receiver has closed, when nothing is left to resend.
Every transfer that was started gets exactly one row: done, failed (error, reset, timeout) or
unfinished (still running when the generator was told to stop). Rows are appended as transfers
end and flushed every second, so a crash loses at most a second of them; SUMMARY holds the counts.
SIGTERM or SIGINT stops new transfers, gives running ones `grace_s`, then records the rest.
"""

from __future__ import annotations

import asyncio
import csv
import json
import math
import random
import resource
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path

from bufsize.topologies.netns import NamespaceSockets
from bufsize.topologies.safefiles import open_new, write_atomic
from bufsize.traffic.workload import HEADER_BYTES, Workload, open_loop_arrivals, think_time

HEADER = struct.Struct("!QQ")  # transfer id, size in bytes (the header counts toward the size)
CHUNK = 1 << 20
FIRST_WRITE = 1 << 16
RECV_BYTES = 1 << 18
TCP_INFO_BYTES = 232
TCP_INFO_MIN = 104  # through tcpi_total_retrans: every kernel since 2.6
TCP_INFO_U32 = struct.Struct("=8B24I")  # state .. wscale bytes, then rto .. total_retrans
SO_MAX_PACING_RATE = getattr(socket, "SO_MAX_PACING_RATE", 47)  # asm-generic/socket.h
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)  # SO_RCVBUF, not capped at rmem_max (root only)


@dataclass
class Transfer:
    id: int
    kind: str  # open (Poisson arrival) or closed (a user's transfer)
    user: int  # closed loop: the user; open loop: -1
    host: str
    size_bytes: int
    t_planned: float = math.nan  # when the workload wanted it to start (monotonic s)
    t_start: float = math.nan
    t_connected: float = math.nan
    t_end: float = math.nan  # the receiver read its last byte
    status: str = "running"
    init_cwnd: int = -1
    mss: int = -1
    retrans: int = -1
    error: str = ""

    @property
    def fct_s(self) -> float:
        return self.t_end - self.t_start


COLUMNS = [f.name for f in fields(Transfer)] + ["fct_s"]


def tcp_info(s: socket.socket) -> tuple[int, int, int]:
    """(snd_cwnd, snd_mss, total_retrans) of a connected socket."""
    raw = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_BYTES)
    if len(raw) < TCP_INFO_MIN:
        return -1, -1, -1
    v = TCP_INFO_U32.unpack_from(raw)
    u32 = v[8:]
    return u32[18], u32[2], u32[23]


class Generator:
    def __init__(self, spec: dict) -> None:
        self.spec = spec
        self.workload = Workload(**spec["workload"])
        self.dist = self.workload.validate()
        self.senders: list[dict] = spec["senders"]
        self.addr = (spec["receiver_ip"], int(spec["port"]))
        self.grace_s = float(spec.get("grace_s", 5.0))
        self.pacing_cap_bps = int(spec.get("pacing_cap_bps") or 0)  # 0: the kernel's, unpaced
        self.max_window_bytes = int(spec.get("max_window_bytes") or 0)  # 0: no cap but the kernel's
        # Transfers whose receiving socket still held the cap when it closed, and those that did not.
        self.clamp_counts = {"kept": 0, "lost": 0}
        self.transfers: dict[int, Transfer] = {}
        self.running: dict[int, asyncio.Task] = {}
        self.next_id = 1
        self.stopping = asyncio.Event()
        self.sockets = NamespaceSockets()
        self.payload = memoryview(bytes(CHUNK))
        self.counts = {"started": 0, "done": 0, "failed": 0, "unfinished": 0, "connections_without_transfer": 0}
        self.late_max_s = 0.0
        self.rows = open_new(spec["records"])  # closed in run()
        self.writer = csv.writer(self.rows)
        self.writer.writerow(COLUMNS)
        self.t0 = 0.0

    # ---- the receiver -------------------------------------------------------------------------

    async def serve(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            conn, _ = await loop.sock_accept(listener)
            conn.setblocking(False)
            loop.create_task(self.receive(conn))

    async def receive(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        buf = bytearray(RECV_BYTES)
        head = b""
        got = 0
        size = None
        tr = None
        try:
            while True:
                n = await loop.sock_recv_into(conn, buf)
                if n == 0:
                    break
                if got == 0 and self.max_window_bytes:
                    self.cap_window(conn)
                if size is None:
                    head += bytes(buf[: min(n, HEADER.size - len(head))])
                    if len(head) == HEADER.size:
                        tid, size = HEADER.unpack(head)
                        tr = self.transfers.get(tid)
                got += n
                if size is not None and got >= size:
                    if tr is not None:
                        tr.t_end = time.monotonic()
                    break
        except OSError:
            pass  # the sender records the failure; a receiver error has nothing to add
        finally:
            if tr is None:
                self.counts["connections_without_transfer"] += 1
            if self.max_window_bytes and got:
                self.count_clamp(conn)
            conn.close()

    # ---- the senders --------------------------------------------------------------------------

    def launch(self, kind: str, user: int, host: dict, size: int, planned: float) -> asyncio.Task:
        tr = Transfer(self.next_id, kind, user, host["name"], size, t_planned=planned)
        self.next_id += 1
        self.transfers[tr.id] = tr
        self.counts["started"] += 1
        task = asyncio.get_running_loop().create_task(self.send(tr, host["ns"]))
        self.running[tr.id] = task
        return task

    async def send(self, tr: Transfer, ns: str) -> None:
        loop = asyncio.get_running_loop()
        s = self.sockets.socket(ns)
        s.setblocking(False)
        if self.pacing_cap_bps:
            s.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, self.pacing_cap_bps // 8)  # bytes/s
        tr.t_start = time.monotonic()
        self.late_max_s = max(self.late_max_s, tr.t_start - tr.t_planned)
        try:
            async with asyncio.timeout(self.workload.timeout_s):
                await loop.sock_connect(s, self.addr)
                tr.t_connected = time.monotonic()
                tr.init_cwnd, tr.mss, _ = tcp_info(s)
                # The header goes out in one write with the first bytes (a write of its own would sit
                # behind Nagle for a round trip); only that first part is copied.
                left = tr.size_bytes - HEADER_BYTES
                head = min(left, FIRST_WRITE - HEADER_BYTES)
                await loop.sock_sendall(s, HEADER.pack(tr.id, tr.size_bytes) + bytes(self.payload[:head]))
                left -= head
                while left > 0:
                    k = min(left, CHUNK)
                    await loop.sock_sendall(s, self.payload[:k])
                    left -= k
                while await loop.sock_recv(s, 64):  # the receiver closes once it has every byte
                    pass
                _, _, tr.retrans = tcp_info(s)
            if math.isnan(tr.t_end):
                tr.status, tr.error = "failed", "the receiver closed before the last byte"
            else:
                tr.status = "done"
        except TimeoutError:
            tr.status, tr.error = "failed", f"not done after {self.workload.timeout_s:g} s"
        except asyncio.CancelledError:
            # Stopped while waiting for the receiver's close: if it had read the last byte already
            # (t_end set), the transfer is complete and only its close was on the way.
            tr.status = "unfinished" if math.isnan(tr.t_end) else "done"
        except OSError as e:
            tr.status, tr.error = "failed", f"{type(e).__name__}: {e.strerror or e}"
        except Exception as e:  # noqa: BLE001 - any other fault is this transfer's, recorded with it
            tr.status, tr.error = "failed", f"{type(e).__name__}: {e}"
        finally:
            s.close()
            self.finish(tr)

    def finish(self, tr: Transfer) -> None:
        self.running.pop(tr.id, None)
        self.transfers.pop(tr.id, None)  # its row is written: a long run must not keep every transfer
        self.counts[tr.status] += 1
        self.writer.writerow([getattr(tr, c) if c != "fct_s" else tr.fct_s for c in COLUMNS])

    # ---- arrivals -----------------------------------------------------------------------------

    def horizon(self) -> float:
        d = self.workload.duration_s
        return self.t0 + d if d is not None else math.inf

    async def wait_until(self, t: float) -> bool:
        """Sleep until monotonic time t; False if told to stop first."""
        delay = t - time.monotonic()
        if delay > 0:
            try:
                await asyncio.wait_for(self.stopping.wait(), delay)
            except TimeoutError:
                pass
        return not self.stopping.is_set()

    async def open_loop(self, rate_per_s: float) -> None:
        w = self.workload
        times = random.Random(w.seed)
        sizes = random.Random(w.seed + 1)
        for k, t in enumerate(open_loop_arrivals(rate_per_s, times, w.transfers, w.duration_s)):
            if not await self.wait_until(self.t0 + t):
                return
            self.launch("open", -1, self.senders[k % len(self.senders)], self.dist.draw(sizes), self.t0 + t)

    async def user(self, u: int) -> None:
        w = self.workload
        rng = random.Random(w.seed * 100_003 + 7 + u)
        host = self.senders[u % len(self.senders)]
        t = self.t0 + think_time(w, rng)  # users start apart
        done = 0
        while w.transfers is None or done < w.transfers:
            if t > self.horizon() or not await self.wait_until(t):
                return
            size = self.dist.draw(rng)
            # Shielded: stopping the arrivals must not cut this transfer short (it gets the grace period).
            await asyncio.shield(self.launch("closed", u, host, size, t))
            done += 1
            t = max(time.monotonic(), t) + think_time(w, rng)

    # ---- the run ------------------------------------------------------------------------------

    async def run(self, ready: Path) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if self.max_window_bytes:
            # Locked, so the kernel's receive-buffer tuning cannot raise the clamp with the buffer
            # (tcp_rcv_space_adjust); accepted sockets inherit it. Eight times the cap (the kernel
            # doubles what it is given) leaves the window, not the buffer, the limit.
            listener.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 4 * self.max_window_bytes)
        listener.bind(self.addr)
        listener.listen(4096)
        listener.setblocking(False)
        server = loop.create_task(self.serve(listener))
        flush = loop.create_task(self.flush_every_second())
        w = self.workload
        rate = w.arrival_rate(float(self.spec["rate_mbps"])) if w.load > 0 else 0.0
        self.dist.mean_bytes()  # computed now (a sample for some kinds), not at the end
        self.t0 = time.monotonic()
        write_atomic(ready, json.dumps({"t0": self.t0, "arrival_rate_per_s": rate}))
        arrivals = [loop.create_task(self.user(u)) for u in range(w.users)]
        if rate > 0:
            arrivals.append(loop.create_task(self.open_loop(rate)))
        stop = loop.create_task(self.stopping.wait())
        await asyncio.wait([stop, asyncio.gather(*arrivals)], return_when=asyncio.FIRST_COMPLETED)
        t_arrivals_end = time.monotonic()
        for a in arrivals:
            a.cancel()
        # Running transfers get to finish: all of them if the workload ended by itself, within the
        # grace period once we are told to stop.
        t_stop = t_arrivals_end
        while self.running:
            pending = list(self.running.values())
            if self.stopping.is_set():
                left = self.grace_s - (time.monotonic() - t_stop)
                if left <= 0:
                    break
                await asyncio.wait(pending, timeout=left)
            else:
                await asyncio.wait([*pending, stop], return_when=asyncio.FIRST_COMPLETED)
                t_stop = time.monotonic()
        for task in list(self.running.values()):
            task.cancel()
        while self.running:
            await asyncio.sleep(0.01)
        server.cancel()
        flush.cancel()
        stop.cancel()
        listener.close()
        self.rows.close()
        self.sockets.close()
        self.write_summary(t_arrivals_end)

    def cap_window(self, conn: socket.socket) -> None:
        """The connection advertises at most max_window_bytes from now on, so its sender keeps at
        most that much in flight (ns-2's `window_`). Set on the accepted socket once its first data
        are in, not on the listener: this kernel (6.18) resets a connection's clamp to what its
        receive buffer allows whenever its estimate of the sender's segment size grows, which the
        first full segment does; after that no segment is larger. Before it, the sender's initial
        window is the limit (bench/results/window-cap/)."""
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, self.max_window_bytes)

    def count_clamp(self, conn: socket.socket) -> None:
        try:
            kept = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP) == self.max_window_bytes
        except OSError:
            kept = False
        self.clamp_counts["kept" if kept else "lost"] += 1

    async def flush_every_second(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.rows.flush()

    def write_summary(self, t_arrivals_end: float) -> None:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        summary = {
            "counts": self.counts,
            "t0": self.t0,
            "arrivals_seconds": round(t_arrivals_end - self.t0, 3),
            "wall_seconds": round(time.monotonic() - self.t0, 3),
            "cpu_seconds": round(ru.ru_utime + ru.ru_stime, 3),
            "late_max_s": round(self.late_max_s, 4),
            "stopped_early": self.stopping.is_set(),
            "size_distribution": self.dist.to_dict(),
            "window_cap": {"bytes": self.max_window_bytes, **self.clamp_counts} if self.max_window_bytes else None,
        }
        write_atomic(self.spec["summary"], json.dumps(summary, indent=1))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m bufsize.traffic.generator SPEC.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[1]).read_text())
    # Two descriptors per running transfer (sender and receiver ends) plus one per host namespace.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 20
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(want, 1 << 20)), hard))
    gen = Generator(spec)
    asyncio.run(gen.run(Path(spec["ready"])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
