"""Propagation delay: netem on the access links where the kernel has it, else the userspace delay line.

netem: half of a host's RTT on its own egress (data direction) and half on the switch port
toward it (ack direction); the bottleneck egress never carries netem.

delay line: one bsz-delayline process in its own namespace between the switch's bottleneck port
and the receiver, that is after the bottleneck queue. It looks up each frame's sender by IPv4
address and holds it for that host's one-way delay (half the RTT each way), so one process serves
any number of hosts with per-host RTTs and the swept buffer is the only queue in front of it.

The pacer (with HTB): HTB's watchdog hrtimer releases each frame of a standing queue 11-14 us late
(p50) with a 20-25 us spread, more than 10 % of a frame time at 62.5 Mb/s. The delay line already
busy-polls to ~1 us, so it sends a 60-byte kick frame on the bottleneck device (a packet socket
made in the switch's namespace, Bottleneck.kick_socket, passed as -k FD) when the next frame is
due; the enqueue runs HTB, which releases the due frame inside that send(), and a tc filter steals
the kick (topologies/shaper.py). HTB stays the only rate limit and the bfifo the only queue.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bufsize.topologies import netns
from bufsize.topologies.errors import MachineError, RunError
from bufsize.topologies.ledger import RunState
from bufsize.topologies.proc import describe_exit, popen_dying_with_parent, status
from bufsize.topologies.units import tc_rate

HELPER = Path(__file__).resolve().parent / "delayline" / "bsz-delayline"
# Limits far above any burst: these queues must never be where packets wait or drop.
NETEM_LIMIT = 100_000
# netem runs in softirq, ahead of every user process; the delay line gets a modest real-time
# priority for the same reason (RT throttling still leaves 5% of each core to everyone else).
RTPRIO = 10
# Wake-ups on this VM come 20-70 us late; sleeping until 50 us before a release and polling the
# rest brings the median lateness to about 1 us for a few % more CPU (bench/results/delayline.md).
SPIN_US = 50
# It rewrites its stats file every 200 ms whatever the traffic: a file older than this means the
# process is stopped (SIGSTOP, a debugger) or starved, so the path carries nothing and samples
# taken meanwhile would be read as a lack of buffer. Generous: a busy VM stalls it for ms, not s.
STALL_S = 3.0


def timing_between(stats0: dict, stats1: dict) -> dict | None:
    """How well the delay line kept time between two of its stats snapshots (DelayLine.stats, each up
    to 200 ms old): the mean lateness of the frames it released each way, and with the line shaper
    the capacity it lost after late wake-ups (beyond its catch-up allowance). None where either
    snapshot is missing (netem, or not written yet). The counters are cumulative, so a window's mean
    comes from the sums: mean1 * n1 - mean0 * n0 over n1 - n0 frames."""
    if not (stats0 and stats1) or stats0.get("pid") != stats1.get("pid"):
        return None
    out: dict = {"seconds": round((stats1["time_ns"] - stats0["time_ns"]) / 1e9, 2)}
    for way in ("forward", "reverse"):
        d0, d1 = stats0[way], stats1[way]
        n = d1["tx_frames"] - d0["tx_frames"]
        late = d1["late_mean_us"] * d1["tx_frames"] - d0["late_mean_us"] * d0["tx_frames"]
        out[f"{way}_late_mean_us"] = round(max(0.0, late) / n, 2) if n > 0 else None
    line0, line1 = stats0.get("line"), stats1.get("line")
    if line0 and line1:
        out["line_lost_ms"] = round((line1["lost_ns"] - line0["lost_ns"]) / 1e6, 3)
        out["line_clock_resets"] = line1["clock_resets"] - line0["clock_resets"]
    return out


def line_lost_share(kept_time: dict | None) -> float | None:
    """The share of a window the line shaper lost to late wake-ups, from timing_between's record
    (None: no line shaper, or no record)."""
    kept = kept_time or {}
    if kept.get("line_lost_ms") is None or not kept.get("seconds"):
        return None
    return kept["line_lost_ms"] / 1000 / kept["seconds"]


def netem_commands(dev: str, one_way_us: int, rate_mbps: float | None) -> list[str]:
    rate = f" rate {tc_rate(rate_mbps)}" if rate_mbps else ""
    return [f"qdisc add dev {dev} root handle 1: netem delay {one_way_us}us limit {NETEM_LIMIT}{rate}\n"]


def helper_ready() -> bool:
    """Whether the delay line's binary is there, building it first where only its source is.

    A checkout builds it in ./setup.sh (make helpers). An installed package (`pip install .`) carries
    the source but no binary, so the first run builds it beside the source: one compiler call with an
    argument list, into a temporary name renamed into place, and only in a directory that no one but
    root can write (a binary root later executes must not come from a place others can change)."""
    if HELPER.exists():
        return True
    source = HELPER.parent / "delayline.c"
    cc = shutil.which("cc") or shutil.which("gcc")
    if not source.exists() or cc is None or os.geteuid() != 0:
        return False
    st = HELPER.parent.stat()
    if st.st_uid != 0 or st.st_mode & 0o022:
        return False
    tmp = HELPER.with_name(f".{HELPER.name}.{os.getpid()}.tmp")
    res = subprocess.run(
        [cc, "-O2", "-g", "-Wall", "-Wextra", "-std=c11", "-o", str(tmp), str(source)], capture_output=True, text=True
    )
    if res.returncode != 0:
        tmp.unlink(missing_ok=True)
        print(f"bufsize: building {HELPER} failed:\n{res.stderr.strip()}", file=sys.stderr)
        return False
    os.replace(tmp, HELPER)
    print(f"bufsize: built the delay line {HELPER} (first use of this installation)", file=sys.stderr)
    return True


def check_helper() -> None:
    if not helper_ready():
        raise MachineError(f"{HELPER} is not built: run ./setup.sh (or make helpers)")


class DelayLine:
    """The bsz-delayline process of one run."""

    def __init__(
        self,
        state: RunState,
        ns: str,
        side_a: str,
        side_b: str,
        hosts: Sequence[tuple[str, float, float]],
        spin_us: int = SPIN_US,
        rtprio: int = RTPRIO,
        kick: socket.socket | None = None,
        rate_mbps: float | None = None,
        line_args: Sequence[str] = (),
        cpu: int | None = None,
        nice: int = 0,
    ) -> None:
        """hosts: (address, forward ms, reverse ms); kick: the bottleneck's kick socket
        (Bottleneck.kick_socket) to pace it at rate_mbps; line_args: LineBottleneck.delayline_args()
        to make it the bottleneck itself; cpu: run only there; nice: its CPU share under normal
        scheduling (rtprio 0)."""
        self.state, self.ns, self.side_a, self.side_b = state, ns, side_a, side_b
        self.map_path = state.workdir / "delayline-map.txt"
        self.stats_path = state.workdir / "delayline-stats.json"
        self.map_path.write_text("".join(f"{ip} {fwd * 1000:.1f} {rev * 1000:.1f}\n" for ip, fwd, rev in hosts))
        self.spin_us = spin_us
        self.rtprio = rtprio
        if kick is not None and not rate_mbps:
            raise ValueError("the pacer needs the bottleneck rate")
        # The caller owns the socket; the helper gets its own copy at start.
        self.kick, self.rate_mbps = kick, rate_mbps
        self.can_pace = self.pacing = kick is not None
        self.line_args = list(line_args)
        self.cpu, self.nice = cpu, nice
        self.proc: subprocess.Popen[str] | None = None

    def start(self, timeout: float = 10.0) -> None:
        check_helper()
        argv = [
            str(HELPER),
            "-a",
            self.side_a,
            "-b",
            self.side_b,
            "-m",
            str(self.map_path),
            "-s",
            str(self.stats_path),
            "-w",
            str(self.spin_us),
            "-p",
            str(self.rtprio),
        ]
        fds: tuple[int, ...] = ()
        if self.kick is not None:
            assert self.rate_mbps
            fds = (self.kick.fileno(),)
            argv += ["-k", str(fds[0]), "-R", str(int(round(self.rate_mbps * 1e6)))]
        argv += self.line_args
        if self.cpu is not None:
            argv += ["-c", str(self.cpu)]
        self.proc = popen_dying_with_parent(
            netns.in_ns(self.ns, argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            pass_fds=fds,  # nsenter execs the helper, which inherits the kick socket
        )
        self.kick = None  # the helper has its copy; the caller closes its own
        self.state.add_process(self.proc.pid, "delay line")
        if self.nice:
            os.setpriority(os.PRIO_PROCESS, self.proc.pid, self.nice)  # nsenter exec'd it: same pid
        # It prints "ready" once both sockets are open; before that frames would not be carried.
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if line.strip() != "ready":
            err = self.proc.stderr.read() if self.proc.poll() is not None and self.proc.stderr else ""
            raise RunError(f"delay line did not start: {err.strip() or 'no ready line within timeout'}")

    def set_pacing(self, on: bool) -> None:
        """Switch a pacing delay line's pacer off or back on while it runs (A/B benchmarks)."""
        if on == self.pacing:
            return
        if not self.can_pace or self.proc is None:
            raise RunError("this delay line was started without the pacer")
        self.proc.send_signal(signal.SIGUSR1)  # the helper toggles
        self.pacing = on

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check(self) -> None:
        """RunError if the delay line has exited or stopped running (no stats heartbeat for STALL_S)."""
        if self.proc is None:
            return
        if self.proc.poll() is not None:
            raise RunError(
                f"the delay line (pid {self.proc.pid}) exited ({describe_exit(self.proc.returncode)}): "
                "the emulated path is broken"
            )
        try:
            age = time.time() - os.stat(self.stats_path).st_mtime
        except OSError:
            return  # not written yet (it writes once before "ready")
        if age > STALL_S:
            stopped = status(self.proc.pid) in ("stopped", "tracing-stop")  # psutil's STATUS_STOPPED, _TRACING_STOP
            how = "stopped (SIGSTOP or a debugger)" if stopped else "not running"
            raise RunError(
                f"the delay line (pid {self.proc.pid}) stalled: {how}, no heartbeat for {age:.1f} s, "
                "so the path carried nothing and samples taken meanwhile are meaningless"
            )

    def stats(self) -> dict:
        """Latest counters the delay line wrote (every 200 ms and at exit)."""
        try:
            return json.loads(self.stats_path.read_text())
        except (OSError, ValueError):
            return {}

    DROP_KEYS = ("drop_pool_full", "drop_oversize", "drop_send_error", "drop_kernel")

    def drop_counts(self) -> dict[str, int]:
        """Its loss counters by direction and kind ("forward drop_kernel": frames the socket lost)."""
        s = self.stats()
        return {f"{d} {k}": int(s.get(d, {}).get(k, 0)) for d in ("forward", "reverse") for k in self.DROP_KEYS}

    def drops(self) -> int:
        return sum(self.drop_counts().values())

    def stop(self) -> dict:
        """End the process and return its final counters."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.state.forget_process(self.proc.pid)
        return self.stats()
