"""Short-lived flows on a live dumbbell: the generator process (bufsize.traffic.generator), its
start, health, stop and records. The experiment (bufsize.shortflows.run) drives it."""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys
import time
from dataclasses import dataclass, field

from bufsize.topologies.config import pacing_cap_bps
from bufsize.topologies.dumbbell import Dumbbell
from bufsize.topologies.errors import RunError
from bufsize.topologies.proc import describe_exit
from bufsize.topologies.safefiles import make_dirs, open_new, write_atomic
from bufsize.traffic.workload import Workload

READY_TIMEOUT_S = 20.0
FLOAT_COLUMNS = ("t_planned", "t_start", "t_connected", "t_end", "fct_s")
INT_COLUMNS = ("id", "user", "size_bytes", "init_cwnd", "mss", "retrans")


@dataclass
class ShortFlowRecords:
    """What the generator recorded: its summary and one row per transfer started."""

    summary: dict
    rows: list[dict] = field(default_factory=list)

    def check_complete(self) -> None:
        """Every transfer started has exactly one row: the record lost none."""
        counts = self.summary["counts"]
        ids = [r["id"] for r in self.rows]
        if len(ids) != counts["started"] or len(set(ids)) != len(ids):
            raise RunError(
                f"the short-flow record is incomplete: {counts['started']} transfers started, "
                f"{len(ids)} rows ({len(set(ids))} distinct)"
            )


def parse_rows(text: str) -> list[dict]:
    rows = []
    for r in csv.DictReader(io.StringIO(text)):
        row: dict = dict(r)
        for k in FLOAT_COLUMNS:
            row[k] = float(r[k]) if r[k] not in ("", "nan") else math.nan
        for k in INT_COLUMNS:
            row[k] = int(r[k])
        rows.append(row)
    rows.sort(key=lambda x: x["id"])
    return rows


class ShortFlows:
    """The short-flow workload of one experiment: senders are the dumbbell's hosts, the sink listens
    on the receiver at `port` (one of the run's ports, so the cwnd monitor can see these flows)."""

    def __init__(
        self, net: Dumbbell, workload: Workload, port: int, grace_s: float = 5.0, max_window_bytes: int = 0
    ) -> None:
        workload.validate()
        self.net, self.workload, self.port, self.grace_s = net, workload, port, grace_s
        self.max_window_bytes = max_window_bytes  # 0: no cap; else the receiver's clamp on every transfer
        self.dir = net.state.workdir / "shortflows"
        self.proc: subprocess.Popen | None = None
        self.t0: float | None = None
        self.arrival_rate_per_s = 0.0

    def start(self) -> float:
        """Start the generator; return its t0 (CLOCK_MONOTONIC) once it listens and arrivals began."""
        make_dirs(self.dir)
        cfg = self.net.cfg
        spec = {
            "workload": self.workload.to_dict(),
            "rate_mbps": self.net.cfg.rate_mbps,
            "senders": [{"ns": h.ns, "name": f"h{h.index}"} for h in self.net.hosts],
            "receiver_ip": self.net.receiver_ip,
            "port": self.port,
            "records": str(self.dir / "transfers.csv"),
            "summary": str(self.dir / "summary.json"),
            "ready": str(self.dir / "ready.json"),
            "grace_s": self.grace_s,
            # --sender-pacing on: every transfer's socket paced by its TCP, as the long flows' are
            "pacing_cap_bps": pacing_cap_bps(cfg.access_mbps, cfg.rate_mbps) if cfg.sender_pacing else 0,
            "max_window_bytes": self.max_window_bytes,
        }
        write_atomic(self.dir / "spec.json", json.dumps(spec, indent=1))
        argv = [sys.executable, "-m", "bufsize.traffic.generator", str(self.dir / "spec.json")]
        # `-m` puts the working directory first on the path: "/" holds no `bufsize` to shadow the package.
        root = "/"
        err = open_new(self.dir / "stderr.txt")  # the child holds it; closed below
        try:
            self.proc = self.net.spawn(
                self.net.receiver_ns, argv, "short-flow generator", stdout=subprocess.DEVNULL, stderr=err, cwd=root
            )
        finally:
            err.close()
        deadline = time.monotonic() + READY_TIMEOUT_S
        ready = self.dir / "ready.json"
        while not ready.exists():
            self.check_process()
            if time.monotonic() > deadline:
                raise RunError(f"the short-flow generator did not start within {READY_TIMEOUT_S:g} s")
            time.sleep(0.02)
        info = json.loads(ready.read_text())
        self.t0, self.arrival_rate_per_s = info["t0"], info["arrival_rate_per_s"]
        return self.t0

    def stderr_tail(self) -> str:
        try:
            lines = (self.dir / "stderr.txt").read_text().strip().splitlines()
        except OSError:
            return ""
        return lines[-1] if lines else ""

    def check_process(self) -> None:
        """Raise if the generator died (exit 0 is its normal end once the workload is done)."""
        if self.proc is not None and self.proc.poll() not in (None, 0):
            tail = self.stderr_tail()
            raise RunError(
                f"the short-flow generator exited ({describe_exit(self.proc.returncode)})"
                + (f": {tail}" if tail else "")
            )

    def finished(self) -> bool:
        """The workload ended by itself (its transfers or duration) and everything is recorded."""
        self.check_process()
        return self.proc is not None and self.proc.poll() == 0

    def stop(self) -> ShortFlowRecords:
        """Stop new transfers, give running ones the grace period, and read the record."""
        proc = self.proc
        if proc is None:
            raise RunError("the short-flow generator was never started")
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=self.grace_s + 10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.net.state.forget_process(proc.pid)
        self.proc = None
        if proc.returncode != 0:
            tail = self.stderr_tail()
            raise RunError(
                f"the short-flow generator failed ({describe_exit(proc.returncode)})" + (f": {tail}" if tail else "")
            )
        summary = json.loads((self.dir / "summary.json").read_text())
        text = (self.dir / "transfers.csv").read_text()
        records = ShortFlowRecords(summary, parse_rows(text))
        records.check_complete()
        return records

    def kill(self) -> None:
        """On a failing run: end the generator at once (its record is not needed)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc is not None:
            self.net.state.forget_process(self.proc.pid)
            self.proc = None
