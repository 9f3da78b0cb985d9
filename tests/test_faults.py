"""Faults injected into a real search part-way: the delay line killed or stalled, an iperf client
killed, the bottleneck device deleted under the monitors. Each must end the search promptly with
one clear line and a non-zero status, keep what was measured (error.json with the probes so far,
the monitors' CSVs) and leave nothing behind. A sweep records such a point and goes on."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from conftest import BUFSIZE, bufsize

from bufsize.topologies import sysctl
from bufsize.topologies.counters import IFINFOMSG, RTM_GETLINK
from bufsize.topologies.errors import RunError
from bufsize.topologies.ledger import ALLOWED_GLOBAL_SYSCTLS, STATE_DIR, live_runs
from bufsize.topologies.netlink import NLM_F_REQUEST, RouteSocket
from bufsize.topologies.netns import exists as ns_exists
from bufsize.topologies.proc import is_running, is_same_process

# 5 Mb/s: a rate the emulation carries even beside the other tests and a loaded machine (a search refuses
# to run on a link that does not carry 90 % of its rate: 20 Mb/s read 82-88 % beside the VM stage).
# --precision 0: the fixed-count median rule, whose probes these tests count (the default is the precision rule).
FAST = ["--rate-mbps", "5", "--rtt-ms", "20", "--cc", "reno", "--settle-s", "1", "--sample-s", "0.5"]
FAST += ["--precision", "0"]
SEARCH = ["search", "--flows", "4", "--hosts", "2", *FAST, "--samples", "3", "--resolution", "0.2", "--fidelity-s", "0"]
FIRST_PROBE = re.compile(r"probe +\d+: ")
ENDS_WITHIN_S = 45  # after the fault: teardown included, on a loaded 2-core machine


class Run:
    """A bufsize command in the background, its stderr collected line by line."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([BUFSIZE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_line(self, pattern: re.Pattern[str], timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(pattern.search(x) for x in self.lines):
                return
            assert self.proc.poll() is None, "ended early:\n" + "\n".join(self.lines[-15:])
            time.sleep(0.1)
        raise AssertionError(f"no line matching {pattern.pattern} within {timeout} s")

    def ledger(self, timeout: float = 60, what: str = "iperf client") -> dict:
        """The run's ledger (owner is this command) once it lists a process `what`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in STATE_DIR.glob("run-*.json"):
                try:
                    st = json.loads(p.read_text())
                except (OSError, ValueError):
                    continue
                if st.get("owner_pid") == self.proc.pid and any(what in x["what"] for x in st["processes"]):
                    return st
            assert self.proc.poll() is None, "ended early:\n" + "\n".join(self.lines[-15:])
            time.sleep(0.1)
        raise AssertionError(f"the run's ledger never listed {what!r}")

    def wait(self, timeout: float) -> float:
        """Seconds until it ended; fails (after killing it) if it did not end in time."""
        t0 = time.monotonic()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(timeout=60)
            raise AssertionError(f"did not end within {timeout} s of the fault (hung)") from None
        self.reader.join(timeout=5)
        return time.monotonic() - t0

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def pid_of(st: dict, what: str) -> int:
    p = next(p for p in st["processes"] if what in p["what"])
    assert is_same_process(p["pid"], p["start"])
    return p["pid"]


def global_sysctls() -> dict[str, str]:
    return {n: sysctl.read(n) for n in ALLOWED_GLOBAL_SYSCTLS if sysctl.exists(n)}  # haltpoll: KVM guests only


def assert_nothing_left(st: dict, sysctls_before: dict[str, str]) -> None:
    assert not [n for n in st["namespaces"] if ns_exists(n)], "namespaces left"
    alive = [p for p in st["processes"] if is_running(p["pid"], p["start"])]
    assert not alive, f"processes left: {alive}"
    assert not (STATE_DIR / f"run-{st['run_id']}.json").exists(), "ledger left"
    assert not [d for d in st["trace_instances"] if Path(d).exists()], "trace instances left"
    # A global sysctl is back, or a live run of someone else still needs it changed.
    needed = {n for s in live_runs() for n in s.global_sysctls}
    originals = sysctl.load_originals()
    for name, before in sysctls_before.items():
        assert sysctl.read(name) == before or name in needed or name not in originals, name


def assert_failed_cleanly(run: Run, out: Path, needle: str) -> dict:
    """Status 1, the last stderr line is the one-line reason, and error.json plus the data so far."""
    assert run.proc.returncode == 1, "\n".join(run.lines[-15:])
    last = run.lines[-1]
    assert last.startswith("bufsize search: ") and needle in last, "\n".join(run.lines[-15:])
    assert not any("Traceback" in x for x in run.lines)
    err = json.loads((out / "error.json").read_text())
    assert needle in err["error"] and err["type"] == "RunError"
    assert not (out / "result.json").exists()
    partial = err["partial"]
    assert len(partial["probes"]) >= 1 and len(partial["measurements"]) >= 1, partial
    # Ten calibration samples, or five that agree within 0.2 % (search.CALIBRATION_AGREE).
    cal = partial["calibration_rates_mbps"]
    assert len(cal) >= 10 or (len(cal) == 5 and max(cal) - min(cal) <= 0.002 * sorted(cal)[2]), cal
    assert "leftovers_of_dead_runs" in err
    # The monitors' data up to the fault, and every sample taken.
    for name in ("queue.csv", "rate.csv", "cpu.csv"):
        rows = (out / name).read_text().splitlines()
        assert len(rows) > 10, name
    samples = (out / "samples.csv").read_text().splitlines()
    assert len(samples) == 1 + sum(len(m["rates_mbps"]) for m in partial["measurements"])
    return err


def search_with_fault(tmp_path: Path, inject, needle: str, at_probe: bool = True) -> dict:
    out = tmp_path / "out"
    before = global_sysctls()
    run = Run(*SEARCH, "--out", str(out))
    undo = None
    try:
        st = run.ledger()
        if at_probe:
            run.wait_line(FIRST_PROBE)
        undo = inject(st)
        took = run.wait(ENDS_WITHIN_S)
    finally:
        if undo is not None:
            undo()
        run.kill()
    err = assert_failed_cleanly(run, out, needle)
    assert_nothing_left(st, before)
    return err | {"took_s": took}


@pytest.mark.integration
def test_delay_line_killed(no_leftovers, tmp_path):
    def inject(st: dict) -> None:
        os.kill(pid_of(st, "delay line"), signal.SIGKILL)

    err = search_with_fault(tmp_path, inject, "the delay line")
    assert "killed by SIGKILL" in err["error"]


@pytest.mark.integration
@pytest.mark.extensive  # the long form; a flow that dies is reported: tests/test_traffic.py
def test_iperf_client_killed(no_leftovers, tmp_path):
    def inject(st: dict) -> None:
        os.kill(pid_of(st, "iperf client"), signal.SIGKILL)

    err = search_with_fault(tmp_path, inject, "iperf client of h")
    assert "killed by SIGKILL" in err["error"]


@pytest.mark.integration
def test_delay_line_stalled(no_leftovers, tmp_path):
    """SIGSTOP: the process lives but carries nothing; its stats heartbeat stops, and samples taken
    meanwhile would read as a lack of buffer. The run must stop, not record them."""
    stopped: list[tuple[int, int | None]] = []

    def inject(st: dict):  # noqa: ANN202
        p = next(p for p in st["processes"] if p["what"] == "delay line")
        os.kill(p["pid"], signal.SIGSTOP)
        stopped.append((p["pid"], p["start"]))

        def undo() -> None:  # only if the run did not end it (it does: SIGKILL after its grace)
            if is_same_process(*stopped[0]):
                os.kill(stopped[0][0], signal.SIGCONT)

        return undo

    err = search_with_fault(tmp_path, inject, "the delay line")
    assert "stalled: stopped" in err["error"]
    assert err["took_s"] < 20


@pytest.mark.integration
@pytest.mark.extensive  # the long form; netlink's answer for a vanished device: test_netlink_read_of_a_vanished...
def test_bottleneck_device_deleted(no_leftovers, tmp_path):
    """The device the monitors and samples read over netlink disappears under them. Its peer, the
    delay line's port, goes with it, so whichever notices first ends the run: the delay line
    (which exits), a sample's or the queue monitor's netlink read (ENODEV)."""

    def inject(st: dict) -> None:
        switch = next(n for n in st["namespaces"] if n.endswith("-s1"))
        subprocess.run(["ip", "-n", switch, "link", "del", f"s1-{st['run_id']}"], check=True)

    err = search_with_fault(tmp_path, inject, "")
    assert re.search(r"device is gone|No such device|the delay line|cannot be read", err["error"]), err["error"]


def sweep_args(out: Path, flows: str = "2,4") -> list[str]:
    return [
        "sweep", "--flows", flows, "--runs", "1", "--hosts", "2", *FAST, "--samples", "1",
        "--resolution", "0.5", "--fidelity-s", "0", "--out", str(out),
    ]  # fmt: skip


def hard_crash_mid_retry(out: Path, before: dict) -> None:
    """A hard crash while the failed point is retried: SIGKILL to the sweep itself, which tears nothing
    down (its children die with it; its namespaces, ledger and sysctls stay for `bufsize clean`), and
    the point's result.json cut short, as a kill in the middle of a plain write would leave it."""
    crash = Run(*sweep_args(out))
    try:
        crashed = crash.ledger(timeout=120)
        crash.wait_line(FIRST_PROBE)
        crash.proc.send_signal(signal.SIGKILL)
        crash.proc.wait(timeout=30)
    finally:
        crash.kill()
    assert any(ns_exists(n) for n in crashed["namespaces"]), "a SIGKILLed run cannot have torn down"
    (out / "n0002-run1" / "result.json").write_text('{"flows": 2, "buffer_pack')
    cleaned = bufsize("clean")
    assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr
    assert_nothing_left(crashed, before)


@pytest.mark.integration
@pytest.mark.parametrize("long_form", [False, pytest.param(True, marks=pytest.mark.extensive)])
def test_sweep_records_failed_point_goes_on_and_retries_only_it(long_form, no_leftovers, tmp_path):
    """A point whose run fails is recorded and the sweep goes on. In the long form (make test-extensive)
    the sweep is then run again: its retry is first cut short by SIGKILL to the sweep itself, which tears
    nothing down, `bufsize clean` removes what it left, and the next run searches the failed point alone
    (what a resumed sweep skips is also tested without traffic: tests/test_cli_reports.py)."""
    out = tmp_path / "sweep"
    before = global_sysctls()
    run = Run(*sweep_args(out))
    try:
        st = run.ledger(timeout=120)  # the first point's run
        run.wait_line(FIRST_PROBE)
        os.kill(pid_of(st, "delay line"), signal.SIGKILL)
        run.wait(400)
    finally:
        run.kill()
    text = "\n".join(run.lines)
    assert run.proc.returncode == 1, text[-3000:]
    assert "1 point(s) failed" in text and re.search(r"N=2 run 1: the delay line .*exited", text), text[-3000:]
    err = json.loads((out / "n0002-run1" / "error.json").read_text())
    assert "the delay line" in err["error"] and err["partial"]["probes"]
    assert not (out / "n0002-run1" / "result.json").exists()
    second = out / "n0004-run1" / "result.json"
    assert json.loads(second.read_text())["flows"] == 4, "the sweep did not go on to the second point"
    assert_nothing_left(st, before)
    kept = second.read_bytes()
    if not long_form:
        return

    hard_crash_mid_retry(out, before)
    assert second.read_bytes() == kept

    again = bufsize(*sweep_args(out), timeout=400)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "1 of 2 points already finished" in again.stderr
    resumed = again.stderr.split("already finished", 1)[1].split("points finished")[0]
    assert not re.search(r"point \d+/\d+: N=4 ", resumed), resumed[-3000:]  # N = 4 is not searched again
    if json.loads(kept)["flags"]["converged"]:  # then its answer is where N = 2 starts
        assert "first probe at" in resumed and "this sweep's answer at N=4" in resumed, resumed[-3000:]
    assert second.read_bytes() == kept
    assert json.loads((out / "n0002-run1" / "result.json").read_text())["flows"] == 2
    assert not (out / "n0002-run1" / "error.json").exists()
    for name in ("manifest.json", "figure.png", "figure.pdf", "table.md", "table.csv"):
        assert (out / name).exists(), name
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["spec"]["flows"] == [2, 4] and manifest["machine"]["kernel"]

    # The same directory with different settings is refused, not mixed in.
    other = bufsize(*sweep_args(out, flows="2,16"), timeout=60)
    assert other.returncode == 2 and "different settings" in other.stderr, other.stderr[-2000:]


def test_netlink_read_of_a_vanished_device_is_a_clear_run_error():
    """The kernel answers with an error (here: no such interface index): RunError naming the device."""
    nl = RouteSocket.__new__(RouteSocket)
    nl.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    nl.sock.bind((0, 0))
    nl.sock.settimeout(1.0)
    nl.ns, nl.dev, nl.stall_s, nl.seq = "bsz-test-s1", "s1-test", 2.0, 0
    body = IFINFOMSG.pack(socket.AF_UNSPEC, 0, 2**31 - 1, 0, 0)
    try:
        with pytest.raises(RunError, match=r"s1-test in bsz-test-s1 failed: No such device \(the device is gone\)"):
            nl.ask(RTM_GETLINK, NLM_F_REQUEST, body)
    finally:
        nl.close()


def test_netlink_stall_is_a_run_error_not_a_hang():
    """No answer at all (a stuck rtnl lock looks like this): RunError after stall_s, not a hang."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    nl = RouteSocket.__new__(RouteSocket)
    nl.sock, nl.ns, nl.dev, nl.stall_s, nl.seq = a, "bsz-test-s1", "s1-test", 0.5, 0
    a.settimeout(0.1)
    t0 = time.monotonic()
    try:
        with pytest.raises(RunError, match="netlink stalled: no answer about s1-test in bsz-test-s1"):
            nl.ask(RTM_GETLINK, NLM_F_REQUEST, b"")
    finally:
        a.close()
        b.close()
    assert 0.5 <= time.monotonic() - t0 < 2
