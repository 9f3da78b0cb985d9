"""Benchmark of the userspace delay line (bsz-delayline) on this machine.

Measures, on a bare wire a -- delay line -- b (bufsize.topologies.wire):
  1. the highest rate of 1514-byte frames it carries without loss (iperf2 UDP, rate steps);
  2. the jitter it adds at 62.5 Mb/s: its own release lateness (p50/p99/max, from its stats) and the
     spread of ping RTTs through it beside 62.5 Mb/s of UDP load;
  3. its CPU use at 62.5 Mb/s (utime+stime of the process / wall time);
for normal and real-time scheduling, on an idle machine and with both cores kept busy.

    .venv/bin/python bench/delayline_bench.py --out bench/results/delayline.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bufsize.topologies import netns  # noqa: E402
from bufsize.topologies.wire import Wire  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
FRAME = 1514
UDP_PAYLOAD = 1472  # + 8 UDP + 20 IP + 14 Ethernet = 1514


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class DelayLineProc:
    def __init__(self, wire: Wire, workdir: Path, one_way_us: int, rtprio: int, spin_us: int = 0) -> None:
        self.stats_path = workdir / "stats.json"
        argv = wire.delayline_argv(
            self.stats_path, "-f", str(one_way_us), "-r", str(one_way_us), "-p", str(rtprio), "-w", str(spin_us)
        )
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"

    def stop(self) -> dict:
        self.proc.terminate()
        self.proc.wait(timeout=5)
        return json.loads(self.stats_path.read_text())


def drops(stats: dict) -> int:
    keys = ("drop_pool_full", "drop_oversize", "drop_send_error", "drop_kernel")
    return sum(stats[d][k] for d in ("forward", "reverse") for k in keys)


def snmp_udp(ns: str, field: str) -> int:
    """A counter from the Udp: lines of /proc/net/snmp as seen inside namespace `ns`."""
    text = subprocess.run(netns.in_ns(ns, ["cat", "/proc/net/snmp"]), capture_output=True, text=True).stdout
    head, vals = [ln.split() for ln in text.splitlines() if ln.startswith("Udp:")][:2]
    return int(vals[head.index(field)])


def backlog_drops() -> int:
    """Frames dropped because a CPU's input backlog (netdev_max_backlog) was full, all CPUs."""
    with open("/proc/net/softnet_stat") as f:
        return sum(int(line.split()[1], 16) for line in f)


def udp_run(wire: Wire, mbps: float, seconds: float) -> dict:
    """iperf2 UDP a -> b at `mbps`; returns what the receiver counted and where losses happened."""
    rcvbuf0, backlog0 = snmp_udp(wire.b, "RcvbufErrors"), backlog_drops()
    # A 4 MB socket buffer so the receiving iperf, not the path, is rarely the one that drops.
    server = subprocess.Popen(
        netns.in_ns(wire.b, ["iperf", "-s", "-u", "-B", "10.9.0.2", "-l", str(UDP_PAYLOAD), "-w", "4M"]),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    time.sleep(0.3)
    try:
        subprocess.run(
            netns.in_ns(
                wire.a,
                [
                    "iperf",
                    "-c",
                    "10.9.0.2",
                    "-u",
                    "-b",
                    str(int(mbps * 1e6)),
                    "-l",
                    str(UDP_PAYLOAD),
                    "-t",
                    str(seconds),
                ],
            ),
            capture_output=True,
            text=True,
            timeout=seconds + 30,
        )
        time.sleep(1.0)
    finally:
        server.terminate()
        out = server.communicate(timeout=5)[0]
    where = {
        "receiver_socket_drops": snmp_udp(wire.b, "RcvbufErrors") - rcvbuf0,
        "backlog_drops": backlog_drops() - backlog0,
    }
    m = re.findall(r"([\d.]+) ([MG])bits/sec\s+[\d.]+ ms\s+(\d+)/\s*(\d+)", out)
    if not m:
        return {"offered_mbps": mbps, "received_mbps": 0.0, "lost": -1, "total": 0} | where
    rate, unit, lost, total = m[-1]
    received = float(rate) * (1000 if unit == "G" else 1)
    return {"offered_mbps": mbps, "received_mbps": received, "lost": int(lost), "total": int(total)} | where


def throughput(wire: Wire, workdir: Path, rtprio: int, steps: list[float], seconds: float) -> list[dict]:
    rows = []
    for mbps in steps:
        dl = DelayLineProc(wire, workdir, 10_000, rtprio)
        r = udp_run(wire, mbps, seconds)
        st = dl.stop()
        r |= {
            "delayline_drops": drops(st),
            "frames": st["forward"]["tx_frames"],
            "late_p99_us": st["forward"]["late_p99_us"],
        }
        rows.append(r)
        print(
            f"  rtprio {rtprio}: offered {mbps:6.0f} Mb/s  received {r['received_mbps']:7.1f}  "
            f"lost {r['lost']}/{r['total']}  delay-line drops {r['delayline_drops']}",
            flush=True,
        )
    return rows


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def jitter_at(wire: Wire, workdir: Path, rtprio: int, spin_us: int, seconds: float, load: bool) -> dict:
    one_way = 43_500
    hogs = (
        [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
        if load
        else []
    )
    try:
        dl = DelayLineProc(wire, workdir, one_way, rtprio, spin_us)
        server = subprocess.Popen(
            netns.in_ns(wire.b, ["iperf", "-s", "-u", "-B", "10.9.0.2"]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.3)
        udp = subprocess.Popen(
            netns.in_ns(
                wire.a,
                ["iperf", "-c", "10.9.0.2", "-u", "-b", "62500000", "-l", str(UDP_PAYLOAD), "-t", str(seconds + 3)],
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)
        cpu0, t0 = cpu_seconds(dl.proc.pid), time.monotonic()
        ping = subprocess.run(
            netns.in_ns(
                wire.a, ["ping", "-n", "-i", "0.01", "-c", str(int(seconds * 100)), "-I", "10.9.0.3", "10.9.0.2"]
            ),
            capture_output=True,
            text=True,
            timeout=seconds + 30,
        )
        cpu1, t1 = cpu_seconds(dl.proc.pid), time.monotonic()
        udp.wait(timeout=30)
        server.terminate()
        server.wait()
        st = dl.stop()
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    rtts = [float(x) for x in re.findall(r"time=([\d.]+) ms", ping.stdout)]
    base = 2 * one_way / 1000
    extra = [r - base for r in rtts]
    return {
        "rtprio": rtprio,
        "spin_us": spin_us,
        "cores_loaded": load,
        "cpu_pct_of_one_core": round(100 * (cpu1 - cpu0) / (t1 - t0), 1),
        "frames_forward": st["forward"]["tx_frames"],
        "delayline_drops": drops(st),
        "lateness_us": {
            "mean": round(st["forward"]["late_mean_us"], 1),
            "p50": st["forward"]["late_p50_us"],
            "p99": st["forward"]["late_p99_us"],
            "max": round(st["forward"]["late_max_us"], 1),
        },
        "ping_samples": len(rtts),
        "ping_rtt_above_configured_ms": {
            "min": round(min(extra), 3),
            "p50": round(statistics.median(extra), 3),
            "p99": round(percentile(extra, 0.99), 3),
            "max": round(max(extra), 3),
        },
        "ping_jitter_ms": {
            "p50_minus_min": round(statistics.median(extra) - min(extra), 3),
            "p99_minus_min": round(percentile(extra, 0.99) - min(extra), 3),
            "max_minus_min": round(max(extra) - min(extra), 3),
        },
    }


def markdown(res: dict) -> str:
    lines = [
        f"# Delay line benchmark ({res['date']}, {res['machine']})",
        "",
        "## Highest loss-free rate of 1514-byte frames (iperf2 UDP, 10 ms each way)",
        "",
        "| rtprio | offered Mb/s | received Mb/s | lost (iperf) | delay-line drops | receiver socket drops"
        " | input backlog drops |",
        "|---|---|---|---|---|---|---|",
    ]
    for prio, rows in res["throughput"].items():
        for r in rows:
            lines.append(
                f"| {prio} | {r['offered_mbps']:.0f} | {r['received_mbps']:.1f} | {r['lost']}/{r['total']} "
                f"| {r['delayline_drops']} | {r['receiver_socket_drops']} | {r['backlog_drops']} |"
            )
    lines += [
        "",
        f"Highest rate with no delay-line drop, by rtprio: {res['max_lossfree_mbps']}. Other losses are "
        "attributed where they happened (receiver socket, input backlog).",
        "",
        "## Jitter and CPU at 62.5 Mb/s (43.5 ms each way, UDP load, ping every 10 ms)",
        "",
        "| rtprio | spin us | cores loaded | CPU % of a core | lateness p50/p99/max us "
        "| ping RTT above configured min/p50/p99/max ms |",
        "|---|---|---|---|---|---|",
    ]
    for j in res["jitter"]:
        la, pr = j["lateness_us"], j["ping_rtt_above_configured_ms"]
        lines.append(
            f"| {j['rtprio']} | {j['spin_us']} | {j['cores_loaded']} | {j['cpu_pct_of_one_core']} "
            f"| {la['p50']:.0f} / {la['p99']:.0f} / {la['max']:.0f} "
            f"| {pr['min']} / {pr['p50']} / {pr['p99']} / {pr['max']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results/delayline.json")
    ap.add_argument("--steps", default="100,200,400,600,800,1000,1200", help="UDP rates to try, Mb/s")
    ap.add_argument("--seconds", type=float, default=5.0)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("run as root", file=sys.stderr)
        return 2
    steps = [float(x) for x in a.steps.split(",")]
    res: dict = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.node()} {platform.release()}, {os.cpu_count()} cores",
        "throughput": {},
        "jitter": [],
    }
    with Wire("bench") as wire, tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for prio in (0, 10):
            print(f"throughput, rtprio {prio}", flush=True)
            res["throughput"][str(prio)] = throughput(wire, work, prio, steps, a.seconds)
        for load in (False, True):
            for prio, spin in ((0, 0), (10, 0), (10, 50)):
                print(f"jitter: rtprio {prio}, spin {spin} us, cores loaded {load}", flush=True)
                res["jitter"].append(jitter_at(wire, work, prio, spin, 10.0, load))
    res["max_lossfree_mbps"] = {
        prio: max(
            (
                r["offered_mbps"]
                for r in rows
                if r["delayline_drops"] == 0 and r["received_mbps"] >= 0.97 * r["offered_mbps"]
            ),
            default=None,
        )
        for prio, rows in res["throughput"].items()
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
