"""Packets per second per core of the delay line (bsz-delayline), for before/after comparisons.

On a bare wire a -- delay line -- b (bufsize.topologies.wire), 1514-byte frames a -> b, for each binary
("variant") and mode:

  cpu       its CPU cost per frame at a fixed offered load (--cpu-fps, 50k frames/s): the process's
            on-CPU time (/proc/PID/schedstat, ns) over a window divided by the frames it sent on in
            that window (its port's tx counter); 1 / that is frames per second per core. Also the busy
            time of its whole CPU (/proc/stat: softirq work done there counts) per frame. Run with
            -w 0 so that the time counted is work and wake-ups, not spinning before a departure;
            under two loads: iperf2 UDP (as bench/delayline_bench.py: smooth, a frame at a time)
            and the raw generator below (bursts of a few to tens of frames).
  search    the highest offered load (raw generator, ascending steps, stop at the first failure)
            carried with less than 0.1 % loss: the delay line's own losses (its input socket, pool,
            send errors, the line's queue) and end to end (sent by a, received at b); a step whose
            generator did not reach 97 % of the asked rate is marked, not passed.
  saturate  the line offered 1.2 x its rate (raw generator) with its production spin: the share of
            its rate it carries (departures over a window), the schedule time it gave up after late
            wake-ups (lost_ns, clock_resets: capacity lost for good) and its departures' lateness.

Modes, with topologies/line.py's settings for the line (-w 1000, nice -20, -B from
default_burst_bytes); the delay line runs on CPU 1 and, as the dumbbell does for the line, RPS
sends the work its sends cause to CPU 0, where the load runs:

    line1g   -L -R 1 Gb/s (82.6k frames/s), the issue's case: cpu, saturate
    line2g   -R 2 Gb/s (165k frames/s): saturate
    line10g  -R 10 Gb/s, never the limit: search (what the delay line itself carries with the line on)
    plain    no -L, 10 ms each way, delay.py's settings (spin 50 us, rtprio 10): cpu, search

iperf's UDP client on one core here tops out below 100k frames/s and its receiver drops most frames
above that, hence the raw generator: an AF_PACKET socket in a (sendmmsg, qdisc bypass), sending the
frames due at each wake-up (~every 90-100 us here), with b dropping everything at ingress (cBPF).

Variants alternate inside every repeat (the order flips each session) so that other work on the
machine hits all of them alike. Each call appends its trials to --out (JSON); --report writes the
markdown tables from everything recorded. Wrap calls in the bench lock, one repeat at a time:

    flock /tmp/bsz-bench.lock .venv/bin/python bench/line_pps.py \\
        --variant before=/tmp/bsz-before/bsz-delayline --variant after=/tmp/bsz-after/bsz-delayline \\
        --out bench/results/line-pps.json
    .venv/bin/python bench/line_pps.py --out bench/results/line-pps.json --report bench/results/line-pps.md
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import platform
import re
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from delayline_bench import FRAME, UDP_PAYLOAD, backlog_drops, snmp_udp  # noqa: E402

from bufsize.topologies import netns  # noqa: E402
from bufsize.topologies.line import NICE as LINE_NICE  # noqa: E402
from bufsize.topologies.line import SPIN_US as LINE_SPIN_US  # noqa: E402
from bufsize.topologies.line import LineStatus, default_burst_bytes  # noqa: E402
from bufsize.topologies.wire import Wire  # noqa: E402

DL_CPU, LOAD_CPU = 1, 0
LINE_LIMIT = 60_000 * FRAME  # topologies/line.py's MAX_BUFFER_BYTES


def line_mode(rate_bps: float, **what) -> dict:
    burst = default_burst_bytes(rate_bps / 1e6)
    args = ["-L", str(LINE_LIMIT), "-R", f"{rate_bps:.0f}", "-B", str(burst), "-f", "0", "-r", "0"]
    return {"args": args, "spin_us": LINE_SPIN_US, "rtprio": 0, "nice": LINE_NICE, "rate_bps": rate_bps, **what}


CAPACITY_STEPS = [150_000, 200_000, 225_000, 250_000, 275_000, 300_000, 350_000, 400_000]
MODES = {
    "line1g": line_mode(1e9, cpu=True, saturate=1.2),
    "line2g": line_mode(2e9, saturate=1.2),
    "line10g": line_mode(1e10, steps=CAPACITY_STEPS),
    "plain": {"args": ["-f", "10000", "-r", "10000"], "spin_us": 50, "rtprio": 10, "nice": 0, "cpu": True,
              "steps": CAPACITY_STEPS},
}  # fmt: skip
LOSS_MAX = 0.001
GENERATOR_MIN = 0.97
SOL_PACKET, PACKET_QDISC_BYPASS = 263, 20
MAX_BATCH = 64


# ---- the raw-frame generator (run inside namespace a by trial(); iperf's UDP client on one core
# tops out below 100k frames/s here, and its receiver drops most frames above that) ----


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _Msghdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32), ("iov", ctypes.POINTER(_Iovec)),
                ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]  # fmt: skip


class _Mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", _Msghdr), ("len", ctypes.c_uint)]


def udp_frame(dst_mac: bytes, src_mac: bytes) -> bytes:
    """A 1514-byte IPv4/UDP frame 10.9.0.1 -> 10.9.0.2 port 9 (UDP checksum 0: none)."""
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + 8 + UDP_PAYLOAD, 0, 0x4000, 64, 17, 0,
                     socket.inet_aton("10.9.0.1"), socket.inet_aton("10.9.0.2"))  # fmt: skip
    total = sum(struct.unpack("!10H", ip))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    ip = ip[:10] + struct.pack("!H", ~total & 0xFFFF) + ip[12:]
    udp = struct.pack("!HHHH", 40000, 9, 8 + UDP_PAYLOAD, 0) + bytes(UDP_PAYLOAD)
    frame = dst_mac + src_mac + struct.pack("!H", 0x0800) + ip + udp
    assert len(frame) == FRAME
    return frame


def generate(dev: str, dst_mac: str, fps: int, seconds: float, max_batch: int) -> dict:
    """Send `fps` frames/s for `seconds` on dev: every wake-up sends the frames due by then (at most
    max_batch per sendmmsg), then sleeps ~20 us; bursts are as long as the wake-ups are late."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK 1 ns: wake-ups as early as the VM gives them
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    s.bind((dev, 0))
    s.setsockopt(SOL_PACKET, PACKET_QDISC_BYPASS, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    frame = udp_frame(bytes.fromhex(dst_mac.replace(":", "")), s.getsockname()[4])
    buf = ctypes.create_string_buffer(frame, len(frame))
    iov = _Iovec(ctypes.cast(buf, ctypes.c_void_p), len(frame))
    msgs = (_Mmsghdr * max_batch)()
    for m in msgs:
        m.hdr.iov = ctypes.pointer(iov)
        m.hdr.iovlen = 1
    sent = calls = errors = 0
    t0 = time.monotonic()
    end = t0 + seconds
    while True:
        now = time.monotonic()
        if now >= end:
            break
        due = int((now - t0) * fps) - sent
        while due > 0:
            n = libc.sendmmsg(s.fileno(), msgs, min(due, max_batch), 0)
            calls += 1
            if n < 0:
                errors += 1
                break
            sent += n
            due -= n
        time.sleep(20e-6)
    return {"sent": sent, "calls": calls, "errors": errors, "elapsed": time.monotonic() - t0}


def sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def variant_info(name: str, path: Path) -> dict:
    src = path.with_name("delayline.c")  # the source it was built from, kept beside it
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    return {
        "name": name,
        "binary": str(path),
        "binary_sha256": sha256(path),
        "source_sha256": sha256(src),
        "repo_head": head,
        "head_source_sha256": hashlib.sha256(
            subprocess.run(
                ["git", "-C", str(REPO), "show", "HEAD:topologies/delayline/delayline.c"], capture_output=True
            ).stdout
        ).hexdigest(),
    }


def schedstat_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def cpu_busy_ticks(cpu: int) -> int:
    """Non-idle time of one CPU (user nice system irq softirq steal), USER_HZ ticks."""
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith(f"cpu{cpu} "):
                v = [int(x) for x in line.split()[1:]]
                return v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
    raise RuntimeError(f"no cpu{cpu} in /proc/stat")


def tx_packets(ns: str, dev: str) -> int:
    out = subprocess.run(["ip", "-n", ns, "-j", "-s", "link", "show", dev], capture_output=True, text=True).stdout
    return int(json.loads(out)[0]["stats64"]["tx"]["packets"])


def steer_rps(wire: Wire, cpu: int) -> None:
    """The frames the delay line sends are received on a's and b's e0: do that work on `cpu`."""
    for ns in (wire.a, wire.b):
        subprocess.run(
            ["ip", "netns", "exec", ns, "tee", "/sys/class/net/e0/queues/rx-0/rps_cpus"],
            input=f"{1 << cpu:x}\n",
            capture_output=True,
            text=True,
            check=True,
        )


class DelayLine:
    def __init__(self, wire: Wire, binary: Path, mode: str, workdir: Path, spin_us: int | None = None) -> None:
        m = MODES[mode]
        self.stats_path = workdir / "stats.json"
        args = [*m["args"], "-w", str(m["spin_us"] if spin_us is None else spin_us), "-p", str(m["rtprio"])]
        args += ["-c", str(DL_CPU)]
        self.status_path = workdir / "line-status" if "-L" in args else None
        if self.status_path:
            args += ["-q", str(self.status_path)]
        argv = netns.in_ns(wire.d, [str(binary), "-a", "da", "-b", "db", "-s", str(self.stats_path), *args])
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if m["nice"]:
            os.setpriority(os.PRIO_PROCESS, self.proc.pid, m["nice"])  # nsenter exec'd it: same pid
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"delay line did not start: {line!r} {self.proc.stderr.read()}")

    def stop(self) -> dict:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        return json.loads(self.stats_path.read_text())


def own_losses(st: dict) -> int:
    """Frames the delay line lost because it could not keep up: its input socket overflowed (it read
    too slowly), its line FIFO or pool overflowed (it sent too slowly), or too big. Not its send
    errors: on a veth those are the receiving CPU's full input backlog (ENOBUFS), a loss of the path
    after it (counted in backlog_drops too)."""
    f = st["forward"]
    n = f["drop_pool_full"] + f["drop_oversize"] + f["drop_kernel"]
    return n + (st["line"]["drops"] if "line" in st else 0)


def cpu_sample(wire: Wire, pid: int) -> tuple[int, int, int, float]:
    """(process on-CPU ns, its CPU's busy ticks, frames it sent on toward b, time)"""
    return schedstat_ns(pid), cpu_busy_ticks(DL_CPU), tx_packets(wire.d, "db"), time.monotonic()


def link_stats(ns: str, dev: str) -> dict:
    out = subprocess.run(["ip", "-n", ns, "-j", "-s", "link", "show", dev], capture_output=True, text=True).stdout
    return json.loads(out)[0]["stats64"]


def set_sink(wire: Wire, on: bool) -> None:
    """With the raw generator, b drops every frame at ingress (cBPF "ret #2" = TC_ACT_SHOT) before
    its IP stack: no receiver to keep up, and no ICMP port-unreachable coming back."""
    q = ["tc", "-n", wire.b, "qdisc"]
    subprocess.run([*q, "del", "dev", "e0", "clsact"], capture_output=True)
    if on:
        subprocess.run([*q, "add", "dev", "e0", "clsact"], check=True)
        subprocess.run(
            ["tc", "-n", wire.b, "filter", "add", "dev", "e0", "ingress", "protocol", "all", "prio", "1",
             "bpf", "da", "bytecode", "1,6 0 0 2,"],
            check=True,
        )  # fmt: skip


class Load:
    """Frames a -> b at a given rate: iperf2 UDP (client and server) or the raw generator."""

    def __init__(self, wire: Wire, kind: str, fps: int, seconds: float) -> None:
        self.wire, self.kind, self.fps, self.seconds = wire, kind, fps, seconds
        self.server = None
        pin = ["taskset", "-c", str(LOAD_CPU)]
        self.rcvbuf0, self.backlog0 = snmp_udp(wire.b, "RcvbufErrors"), backlog_drops()
        self.rx0 = link_stats(wire.b, "e0")["rx"]["packets"]
        if kind == "iperf":
            self.server = subprocess.Popen(
                netns.in_ns(wire.b, [*pin, "iperf", "-s", "-u", "-B", "10.9.0.2", "-l", str(UDP_PAYLOAD), "-w", "4M"]),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            time.sleep(0.3)
            argv = ["iperf", "-c", "10.9.0.2", "-u", "-b", f"{fps}pps", "-l", str(UDP_PAYLOAD), "-t", str(seconds)]
        else:
            mac_b = json.loads(subprocess.run(["ip", "-n", wire.b, "-j", "link", "show", "e0"], capture_output=True,
                                              text=True, check=True).stdout)[0]["address"]  # fmt: skip
            argv = [sys.executable, __file__, "--generate", f"e0,{mac_b},{fps},{seconds},{MAX_BATCH}"]
        self.client = subprocess.Popen(
            netns.in_ns(wire.a, [*pin, *argv]), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    def finish(self) -> dict:
        out = self.client.communicate(timeout=self.seconds + 30)[0]
        time.sleep(1.0 if self.kind == "iperf" else 0.3)
        r: dict = {"load": self.kind}
        if self.server is not None:
            self.server.terminate()
            srv = self.server.communicate(timeout=5)[0]
            m = re.findall(r"([\d.]+) ([MG])bits/sec\s+[\d.]+ ms\s+(\d+)/\s*(\d+)", srv)
            lost, total = (int(m[-1][2]), int(m[-1][3])) if m else (-1, 0)
            r |= {"sent": total, "sent_fps": round(total / self.seconds), "lost": lost}
        else:
            g = json.loads(out.strip().splitlines()[-1])
            delivered = link_stats(self.wire.b, "e0")["rx"]["packets"] - self.rx0
            r |= {"sent": g["sent"], "sent_fps": round(g["sent"] / g["elapsed"]), "lost": g["sent"] - delivered,
                  "generator_calls": g["calls"], "generator_errors": g["errors"]}  # fmt: skip
        r["e2e_loss"] = r["lost"] / r["sent"] if r["sent"] > 0 and r["lost"] >= 0 else None
        r["receiver_socket_drops"] = snmp_udp(self.wire.b, "RcvbufErrors") - self.rcvbuf0
        r["backlog_drops"] = backlog_drops() - self.backlog0
        return r

    def kill(self) -> None:
        for p in (self.client, self.server):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def trial(wire: Wire, binary: Path, mode: str, load: str, fps: int, seconds: float, workdir: Path,
          cpu_window: float = 0.0, spin_us: int | None = None) -> dict:  # fmt: skip
    """`load` a -> b at `fps` frames/s through a fresh delay line; with cpu_window, its CPU cost
    over that many seconds in the middle of the run."""
    set_sink(wire, load == "raw")
    dl = DelayLine(wire, binary, mode, workdir, spin_us)
    ld = None
    cpu: dict = {}
    try:
        tx0 = tx_packets(wire.d, "db")
        ld = Load(wire, load, fps, seconds)
        if cpu_window:
            time.sleep((seconds - cpu_window) / 2)
            status = LineStatus(dl.status_path) if dl.status_path else None
            l0, lt0 = (status.read() if status else {}), time.monotonic()
            s0, b0, f0, t0 = cpu_sample(wire, dl.proc.pid)
            time.sleep(cpu_window)
            s1, b1, f1, t1 = cpu_sample(wire, dl.proc.pid)
            l1, lt1 = (status.read() if status else {}), time.monotonic()
            if status:
                status.close()
            frames = f1 - f0
            cpu = {
                "window_s": round(t1 - t0, 3),
                "frames": frames,
                "fps": round(frames / (t1 - t0)),
                "proc_cpu_s": (s1 - s0) / 1e9,
                "proc_us_per_frame": (s1 - s0) / 1e3 / frames if frames else None,
                "cpu_busy_share": (b1 - b0) / os.sysconf("SC_CLK_TCK") / (t1 - t0),
                "cpu_us_per_frame": (b1 - b0) / os.sysconf("SC_CLK_TCK") * 1e6 / frames if frames else None,
            }
            if status:
                cpu["line"] = {k: l1[k] - l0[k] for k in ("sent_frames", "drops", "clock_resets", "lost_ns")}
                cpu["line"]["window_s"] = lt1 - lt0  # its own: the samples between take tens of ms
        lr = ld.finish()
        tx1 = tx_packets(wire.d, "db")
    finally:
        if ld is not None:
            ld.kill()
        st = dl.stop()
    f = st["forward"]
    read = f["rx_frames"] + f["drop_kernel"]
    own = own_losses(st)
    r = {
        "mode": mode,
        "asked_fps": fps,
        "seconds": seconds,
        **lr,
        "dl_frames_in": read,
        "dl_frames_out": tx1 - tx0,
        "dl_own_losses": own,
        "dl_send_errors": f["drop_send_error"],
        "dl_loss": own / read if read else None,
        "dl_drop_kernel": f["drop_kernel"],
        "line_drops": st.get("line", {}).get("drops"),
        "line_clock_resets": st.get("line", {}).get("clock_resets"),
        "line_lost_ns": st.get("line", {}).get("lost_ns"),
        "late_p50_us": f["late_p50_us"],
        "late_p99_us": f["late_p99_us"],
        "late_max_us": f["late_max_us"],
    }
    if cpu:
        r["cpu"] = cpu
    # A pass: the sender reached the rate, and neither the delay line nor the path lost 0.1 %.
    r["generator_limited"] = r["sent_fps"] < GENERATOR_MIN * fps
    r["dl_pass"] = r["dl_loss"] is not None and r["dl_loss"] < LOSS_MAX and not r["generator_limited"]
    r["e2e_pass"] = r["e2e_loss"] is not None and r["e2e_loss"] < LOSS_MAX and not r["generator_limited"]
    return r


def search(wire: Wire, binary: Path, mode: str, steps: list[int], seconds: float, workdir: Path, tag: str) -> dict:
    """Ascending steps until the first one the delay line (or the path) fails."""
    rows: list[dict] = []
    best_dl = best_e2e = 0
    dl_ok = e2e_ok = True
    for fps in steps:
        r = trial(wire, binary, mode, "raw", fps, seconds, workdir)
        rows.append(r)
        dl_ok = dl_ok and r["dl_pass"]
        e2e_ok = e2e_ok and r["e2e_pass"]
        best_dl = fps if dl_ok else best_dl
        best_e2e = fps if e2e_ok else best_e2e
        print(
            f"  {tag} {mode}: {fps:6d} fps asked, {r['sent_fps']:6d} sent, delay-line loss {r['dl_own_losses']}"
            f"/{r['dl_frames_in']} (input socket {r['dl_drop_kernel']}, line {r['line_drops']}; send errors "
            f"{r['dl_send_errors']}), "
            f"end-to-end loss {r['lost']}/{r['sent']}, backlog drops {r['backlog_drops']}"
            f"{' (generator-limited)' if r['generator_limited'] else ''}",
            flush=True,
        )
        if not dl_ok and not e2e_ok:
            break
    return {"max_fps_dl": best_dl, "max_fps_e2e": best_e2e, "steps": rows}


def saturate(wire: Wire, binary: Path, mode: str, seconds: float, window: float, workdir: Path, tag: str) -> dict:
    """The line offered more than its rate: what share of the rate it carries, and why not all."""
    cap = MODES[mode]["rate_bps"] / 8 / FRAME
    r = trial(wire, binary, mode, "raw", round(MODES[mode]["saturate"] * cap), seconds, workdir, window)
    c = r["cpu"]
    ln = c["line"]
    r["carried_share"] = ln["sent_frames"] / ln["window_s"] / cap
    r["lost_share"] = ln["lost_ns"] / 1e9 / ln["window_s"]
    r["clock_resets_per_s"] = ln["clock_resets"] / ln["window_s"]
    print(
        f"  {tag} {mode}: offered {r['sent_fps']} fps, carried {100 * r['carried_share']:.2f} % of the rate, "
        f"gave up {100 * r['lost_share']:.2f} % of the time ({r['clock_resets_per_s']:.0f} resets/s), "
        f"late p50/p99/max {r['late_p50_us']}/{r['late_p99_us']}/{r['late_max_us']:.0f} us, "
        f"input-socket drops {r['dl_drop_kernel']}",
        flush=True,
    )
    return r


def spread(xs: list[float], fmt: str = "{:.3g}") -> str:
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}..{fmt.format(max(xs))}]"


def report(data: dict) -> str:
    trials = data["trials"]
    variants: dict[str, dict] = {}
    for t in trials:
        variants.setdefault(t["variant"]["name"], t["variant"])
    modes = sorted({t["mode"] for t in trials}, key=list(MODES).index)
    loads = sorted({k for t in trials for k in t.get("cpu", {})})

    def mine(mode: str, v: str, key: str) -> list:
        return [t[key] for t in trials if t["mode"] == mode and t["variant"]["name"] == v and key in t]

    lines = [
        "CPU per frame at a fixed offered load (-w 0: no spinning), median [range]:",
        "",
        "| mode | load | variant | frames/s in window | process CPU us/frame | frames/s per core (1/that) "
        "| its CPU's busy us/frame | late p50 / p99 us | runs |",
        "|---" * 9 + "|",
    ]
    for mode in modes:
        for load in loads:
            for v in variants:
                c = [x[load] for x in mine(mode, v, "cpu") if load in x]
                if not c:
                    continue
                us = [x["cpu"]["proc_us_per_frame"] for x in c]
                lines.append(
                    f"| {mode} | {load} | {v} | {spread([x['cpu']['fps'] for x in c], '{:.0f}')} "
                    f"| {spread(us, '{:.2f}')} | {spread([1e6 / u for u in us if u], '{:.0f}')} "
                    f"| {spread([x['cpu']['cpu_us_per_frame'] for x in c], '{:.2f}')} "
                    f"| {spread([x['late_p50_us'] for x in c], '{:.0f}')} "
                    f"/ {spread([x['late_p99_us'] for x in c], '{:.0f}')} | {len(c)} |"
                )
    lines += [
        "",
        "Highest offered load carried (raw generator), frames/s, median [range]:",
        "",
        "| mode | variant | delay line's own loss < 0.1 % | end-to-end loss < 0.1 % | runs | steps tried |",
        "|---" * 6 + "|",
    ]
    for mode in modes:
        for v in variants:
            s = mine(mode, v, "search")
            if s:
                tried = sorted({r["asked_fps"] for x in s for r in x["steps"]})
                lines.append(
                    f"| {mode} | {v} | {spread([x['max_fps_dl'] for x in s], '{:.0f}')} "
                    f"| {spread([x['max_fps_e2e'] for x in s], '{:.0f}')} | {len(s)} "
                    f"| {', '.join(f'{x // 1000}k' for x in tried)} |"
                )
    lines += [
        "",
        "The line offered 1.2 x its rate (raw generator, production spin), median [range]:",
        "",
        "| mode | variant | offered frames/s | carried, % of the rate | schedule given up, % of the time "
        "| clock resets /s | late p50 / p99 / max us | runs |",
        "|---" * 8 + "|",
    ]
    for mode in modes:
        for v in variants:
            s = mine(mode, v, "saturate")
            if s:
                lines.append(
                    f"| {mode} | {v} | {spread([x['sent_fps'] for x in s], '{:.0f}')} "
                    f"| {spread([100 * x['carried_share'] for x in s], '{:.2f}')} "
                    f"| {spread([100 * x['lost_share'] for x in s], '{:.2f}')} "
                    f"| {spread([x['clock_resets_per_s'] for x in s], '{:.0f}')} "
                    f"| {spread([x['late_p50_us'] for x in s], '{:.0f}')} "
                    f"/ {spread([x['late_p99_us'] for x in s], '{:.0f}')} "
                    f"/ {spread([x['late_max_us'] for x in s], '{:.0f}')} | {len(s)} |"
                )
    lines += ["", "Variants:", ""]
    for v in variants.values():
        lines.append(
            f"- `{v['name']}`: {v['binary']} (binary sha256 {str(v['binary_sha256'])[:12]}, source sha256 "
            f"{str(v['source_sha256'])[:12]}; repository HEAD {v['repo_head'][:10]}, whose delayline.c has sha256 "
            f"{v['head_source_sha256'][:12]})"
        )
    lines += ["", "Sessions:", ""]
    for se in data["sessions"]:
        lines.append(
            f"- {se['index']}: {se['started']}, {se['wall_s']} s, load average {se['loadavg_start'][0]:.1f} -> "
            f"{se['loadavg_end'][0]:.1f}, {se['machine']}"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--generate":  # inside namespace a, from Load
        dev, mac, fps, seconds, batch = sys.argv[2].split(",")
        print(json.dumps(generate(dev, mac, int(fps), float(seconds), int(batch))), flush=True)
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", action="append", default=[], help="NAME=PATH of a bsz-delayline binary")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--measure", default="cpu,search,saturate", help="what to run, of the mode's")
    ap.add_argument("--steps", help="offered loads to search, frames/s, ascending (default: the mode's)")
    ap.add_argument("--seconds", type=float, default=3.0, help="each step of the rate search")
    ap.add_argument("--cpu-fps", type=int, default=50_000, help="offered load of the CPU measurement")
    ap.add_argument("--cpu-loads", default="iperf,raw", help="generators of the CPU measurement")
    ap.add_argument("--cpu-seconds", type=float, default=6.0)
    ap.add_argument("--cpu-window", type=float, default=4.0)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/line-pps.json")
    ap.add_argument("--report", type=Path, help="only write the markdown tables of --out's trials here")
    a = ap.parse_args()
    data = json.loads(a.out.read_text()) if a.out.exists() else {"trials": [], "sessions": []}
    if a.report:
        a.report.write_text(report(data))
        print(report(data))
        return 0
    if os.geteuid() != 0:
        print("run as root", file=sys.stderr)
        return 2
    variants = []
    for spec in a.variant:
        name, _, path = spec.partition("=")
        variants.append(variant_info(name, Path(path).resolve()))
    if not variants:
        ap.error("give at least one --variant NAME=PATH")
    modes = a.modes.split(",")
    measure = set(a.measure.split(","))
    steps = [int(x) for x in a.steps.split(",")] if a.steps else None
    loads = [x for x in a.cpu_loads.split(",") if x]
    session = {
        "index": len(data["sessions"]),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": f"{platform.node()} {platform.release()}, {os.cpu_count()} cores",
        "loadavg_start": list(os.getloadavg()),
        "argv": sys.argv[1:],
    }
    print(f"session {session['index']} started {session['started']}", flush=True)
    t_start = time.monotonic()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with Wire("pps") as wire, tempfile.TemporaryDirectory() as tmp:
        steer_rps(wire, LOAD_CPU)
        work = Path(tmp)
        for rep in range(a.repeats):
            order = variants if (session["index"] + rep) % 2 == 0 else variants[::-1]
            for mode in modes:
                m = MODES[mode]
                for v in order:
                    binary, tag = Path(v["binary"]), v["name"]
                    row: dict = {"variant": v, "mode": mode, "session": session["index"], "repeat": rep}
                    if "cpu" in measure and m.get("cpu"):
                        row["cpu"] = {}
                        for load in loads:
                            r = trial(wire, binary, mode, load, a.cpu_fps, a.cpu_seconds, work, a.cpu_window, 0)
                            row["cpu"][load] = r
                            c = r["cpu"]
                            print(
                                f"  {tag} {mode}: CPU at {c['fps']} fps ({load}): {c['proc_us_per_frame']:.2f} "
                                f"us/frame (process), {c['cpu_us_per_frame']:.2f} (its CPU busy), late p50/p99 "
                                f"{r['late_p50_us']}/{r['late_p99_us']} us",
                                flush=True,
                            )
                    if "search" in measure and m.get("steps"):
                        row["search"] = search(wire, binary, mode, steps or m["steps"], a.seconds, work, tag)
                        print(
                            f"  {tag} {mode}: max {row['search']['max_fps_dl']} fps (delay line), "
                            f"{row['search']['max_fps_e2e']} (end to end)",
                            flush=True,
                        )
                    if "saturate" in measure and m.get("saturate"):
                        row["saturate"] = saturate(wire, binary, mode, a.cpu_seconds, a.cpu_window, work, tag)
                    data["trials"].append(row)
                    a.out.write_text(json.dumps(data, indent=1) + "\n")  # kept if a later step fails
        set_sink(wire, False)
    session["wall_s"] = round(time.monotonic() - t_start, 1)
    session["loadavg_end"] = list(os.getloadavg())
    data["sessions"].append(session)
    a.out.write_text(json.dumps(data, indent=1) + "\n")
    print(report(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
