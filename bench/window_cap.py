"""Where a receiver's window clamp holds on this kernel: the measurement behind `--max-window`.

`bufsize shortflows --max-window W` caps each short transfer at W packets in flight, as ns-2's
`window_` does, with the receiver's TCP_WINDOW_CLAMP. Where that option is set decides whether it
holds, so each way is measured here: one 200-packet transfer from the one sender host of a dumbbell
(100 Mb/s, RTT 40 ms, 300 packets of buffer, reno, initial window 4), the receiver's socket set
up one of three ways, `--runs` times each, at caps of 4 and 20 packets:

- none: no clamp (slow start from 4 passes 200 packets in six rounds);
- listener: TCP_WINDOW_CLAMP and a locked receive buffer on the listening socket, before accept;
- accepted: the receive buffer locked on the listener, the clamp set on the accepted socket once
  its first data are in (what the generator does).

The sender times connect() to the receiver's close: one round trip for the handshake, one a burst
of slow start from 4 capped at W (theory.model.slow_start_bursts), less the last burst's, plus
the last data's and the close's half trips: bursts + 1 round trips.
Writes runs.jsonl and README.md's table (median [range] of the runs) into --out.

    .venv/bin/python bench/window_cap.py --runs 3 --out bench/results/window-cap
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchproc import run_main  # noqa: E402

from bufsize.theory.model import slow_start_bursts  # noqa: E402
from bufsize.topologies.config import DumbbellConfig  # noqa: E402
from bufsize.topologies.dumbbell import Dumbbell  # noqa: E402
from bufsize.topologies.netns import in_ns  # noqa: E402
from bufsize.topologies.units import packets_to_bytes  # noqa: E402
from bufsize.traffic.generator import SO_RCVBUFFORCE  # noqa: E402
from bufsize.traffic.workload import MSS_BYTES as MSS  # noqa: E402

PACKETS = 200
RTT_S = 0.04
IW = 4
PORT = 5999
MODES = ("none", "listener", "accepted")


def receive(mode: str, cap: int, ip: str) -> None:
    """Inside the receiver's namespace: accept one connection, read it all, report the clamps."""
    clamp = cap * MSS
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if mode != "none":
        ls.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 4 * clamp)
    if mode == "listener":
        ls.setsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, clamp)
    ls.bind((ip, PORT))
    ls.listen(1)
    print("listening", flush=True)
    conn, _ = ls.accept()
    at_accept = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP)
    got = 0
    while chunk := conn.recv(1 << 16):
        if got == 0 and mode == "accepted":
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, clamp)
        got += len(chunk)
    at_end = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP)
    conn.close()
    print(json.dumps({"bytes": got, "clamp_at_accept": at_accept, "clamp_at_end": at_end}), flush=True)


def send(ip: str) -> None:
    """Inside the sender's namespace: one transfer, timed from connect() to the receiver's close."""
    t = time.monotonic()
    s = socket.create_connection((ip, PORT))
    s.sendall(bytes(PACKETS * MSS))
    s.shutdown(socket.SHUT_WR)
    s.recv(1)
    print(json.dumps({"seconds": time.monotonic() - t}), flush=True)


def one_run(net: Dumbbell, mode: str, cap: int) -> dict:
    me = [sys.executable, str(Path(__file__).resolve())]
    rx = subprocess.Popen(in_ns(net.receiver_ns, [*me, "--receive", mode, str(cap), net.receiver_ip]),
                          stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert rx.stdout is not None
        if rx.stdout.readline().strip() != "listening":
            raise RuntimeError("the receiver did not start")
        tx = subprocess.run(in_ns(net.hosts[0].ns, [*me, "--send", net.receiver_ip]),
                            capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
        out, _ = rx.communicate(timeout=30)
    finally:
        if rx.poll() is None:
            rx.kill()
            rx.wait()
    seconds = json.loads(tx.stdout)["seconds"]
    return {"mode": mode, "cap_packets": cap, "seconds": round(seconds, 4), "rtts": round(seconds / RTT_S, 2),
            **json.loads(out)}  # fmt: skip


def table(rows: list[dict], runs: int) -> list[str]:
    out = [
        "| cap (packets) | receiver | transfer, round trips: median [range] | with the cap held, or none |"
        " clamp at accept / at end, bytes |",
        "| --- | --- | --- | --- | --- |",
    ]
    for cap in sorted({r["cap_packets"] for r in rows}):
        for mode in MODES:
            rs = [r for r in rows if r["cap_packets"] == cap and r["mode"] == mode]
            if not rs:
                continue
            v = [r["rtts"] for r in rs]
            clamps = sorted({(r["clamp_at_accept"], r["clamp_at_end"]) for r in rs})
            exact = len(slow_start_bursts(PACKETS, IW, cap if mode != "none" else None)) + 1
            out.append(f"| {cap} | {mode} | {statistics.median(v):.1f} [{min(v):.1f}..{max(v):.1f}] | {exact} | "
                       f"{', '.join(f'{a} / {b}' for a, b in clamps)} |")  # fmt: skip
    out.append("")
    out.append(f"{runs} runs a row; {PACKETS} packets of {MSS} bytes, initial window {IW}, RTT {RTT_S * 1e3:g} ms.")
    return out


def main() -> int:
    if sys.argv[1:2] == ["--receive"]:  # the two ends, started by one_run inside the namespaces
        receive(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return 0
    if sys.argv[1:2] == ["--send"]:
        send(sys.argv[2])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--caps", default="4,20", help="caps in packets (default 4,20)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root")
    caps = [int(c) for c in a.caps.split(",")]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = DumbbellConfig(hosts=1, rate_mbps=100, rtt_ms=[RTT_S * 1e3], cc="reno", buffer_bytes=packets_to_bytes(300))
    rows = []
    t0 = time.monotonic()
    with Dumbbell(cfg, "delayline") as net:
        net.set_initcwnd(IW)
        for run in range(1, a.runs + 1):
            for cap in caps:
                for mode in MODES:  # interleaved, so a slow spell of the machine spreads over every mode
                    r = one_run(net, mode, cap) | {"run": run}
                    print(json.dumps(r), flush=True)
                    rows.append(r)
    with (out / "runs.jsonl").open("w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    (out / "table.md").write_text("\n".join(table(rows, a.runs)) + "\n")
    print("\n".join(table(rows, a.runs)))
    print(f"{time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    run_main(main, "stopped")
