"""The line shaper in a real dumbbell: the delay line as the bottleneck (`--shaper line`)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import in_ns

from bufsize.longlived.verify import measure_rtts
from bufsize.monitors.drops import DropMonitor
from bufsize.topologies import FRAME_BYTES, ledger
from bufsize.topologies.config import DumbbellConfig
from bufsize.topologies.dumbbell import Dumbbell

pytestmark = pytest.mark.integration


LINE = DumbbellConfig(hosts=2, rate_mbps=20, rtt_ms=[10.0, 30.0], buffer_bytes=40 * FRAME_BYTES, shaper="line")


@pytest.fixture
def net(no_leftovers):
    with Dumbbell(LINE, "delayline") as n:
        yield n


def test_no_qdisc_tree_on_the_switch_and_the_right_rtts(net):
    out = in_ns(net.switch_ns, "tc", "qdisc", "show", "dev", net.plan.bottleneck_dev)
    assert "bfifo" not in out and "htb" not in out and "tbf" not in out
    assert (net.bottleneck.ns, net.bottleneck.dev) == (net.delay_ns, net.plan.delay_devs[1])
    # All of the RTT sits on the ack path; TCP (and ping) see the same round trip, never less than
    # configured (how close to it is a claim: tests/claims host-rtts).
    for r in measure_rtts(net, count=5, interval=0.05):
        assert r.min_ms >= r.configured_ms and r.loss_pct == 0, r


def test_the_lines_files_are_on_tmpfs_where_the_machine_has_one(net):
    """Its stats and status page are written inside its real-time loop: on a disk they stalled it
    for up to 415 ms here (/run on ext4), so they go to tmpfs (ledger.scratch_root)."""
    files = [net.bottleneck.status_path, net.delayline.stats_path]
    assert all(f.exists() and f.parent == net.state.workdir for f in files), files
    tmpfs_here = "tmpfs" in (ledger.fs_type(ledger.STATE_DIR), ledger.fs_type(ledger.SHM_SCRATCH))
    assert (ledger.fs_type(net.state.workdir) == "tmpfs") == tmpfs_here


def test_delay_line_placed_and_its_sends_work_steered_away(net):
    pid = net.delayline.proc.pid
    assert os.getpriority(os.PRIO_PROCESS, pid) == -20
    # This process was moved off the line's CPU when the dumbbell was built: the CPUs it had are
    # its CPUs now plus the line's.
    cpus = os.sched_getaffinity(0) | os.sched_getaffinity(pid)
    if len(cpus) < 2:
        pytest.skip("one CPU: nothing to isolate the delay line from")  # not counted as a pass
    own = max(cpus)
    assert os.sched_getaffinity(pid) == {own}
    assert own not in os.sched_getaffinity(0)  # the toolkit and what it starts keep off that CPU
    others = sum(1 << c for c in cpus if c != own)
    for ns, dev in ((net.switch_ns, net.plan.bottleneck_dev), (net.receiver_ns, net.receiver_dev)):
        path = f"/sys/class/net/{dev}/queues/rx-0/rps_cpus"
        mask = subprocess.run(["ip", "netns", "exec", ns, "cat", path], capture_output=True, text=True, check=True)
        assert int(mask.stdout.strip().replace(",", ""), 16) == others


def test_buffer_changes_in_place_and_drops_are_the_bottlenecks(net):
    """A flow through a 4-packet line: the limit changes in place, the queue never holds more, the
    counters carry on, drops are counted at the bottleneck and nowhere else, and every byte the
    line says it sent left on its port toward the receiver."""
    server = net.spawn(net.receiver_ns, ["iperf", "-s", "-p", "5001"], "server", stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    drops = DropMonitor(net).start()
    client = net.spawn(
        net.hosts[0].ns,
        ["iperf", "-c", net.receiver_ip, "-t", "7", "-P", "4"],
        "client",
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    reader = net.bottleneck.leaf_reader()
    counters = net.bottleneck.counters()
    try:
        time.sleep(2.5)
        before = reader.read()
        assert before.limit == 40 * FRAME_BYTES and before.packets > 0
        net.set_buffer(4 * FRAME_BYTES)
        assert net.buffer_bytes == 4 * FRAME_BYTES
        time.sleep(0.5)  # the 40-packet backlog drains in 24 ms; arrivals meanwhile are refused
        samples = []
        for _ in range(200):
            samples.append(reader.read())
            time.sleep(0.005)
        assert all(s.limit == 4 * FRAME_BYTES and s.backlog <= 4 * FRAME_BYTES for s in samples)
        assert max(s.backlog for s in samples) > 0, "four flows never queued a frame"
        assert samples[-1].packets > before.packets, "the line stopped or its counters were reset"
        out, _ = client.communicate(timeout=20)
        assert client.returncode == 0 and "connected" in out
        summary = drops.stop()
        time.sleep(0.2)
        final, c = reader.read(), counters.read()
    finally:
        reader.close()
        counters.close()
        for p in (client, server):
            p.kill()
            p.wait()
    assert summary.bottleneck > 0 and summary.outside == {}, summary
    # Nothing else travels toward the receiver, so the port's transmit count is the line's.
    assert c.tx_bytes == final.bytes and c.tx_packets == final.packets


def test_status_page_is_read_whole_and_refuses_a_dead_line(tmp_path: Path):
    from bufsize.topologies.errors import RunError
    from bufsize.topologies.line import LineStatus

    (tmp_path / "empty").write_bytes(b"\0" * 4096)  # no magic: never filled in by a delay line
    with pytest.raises(RunError, match="never filled in"):
        LineStatus(tmp_path / "empty", timeout=0.1)
    with pytest.raises(RunError, match="cannot be read"):
        LineStatus(tmp_path / "missing", timeout=0.1)


def test_status_read_waits_out_a_writer_mid_update_and_gives_up_on_a_stuck_one(tmp_path: Path):
    """The delay line can be preempted mid-update (odd sequence number): a reader retries by time,
    returns once the update is finished, and names a writer that never finishes."""
    import struct
    import threading

    from bufsize.topologies.errors import RunError
    from bufsize.topologies.line import LAYOUT, MAGIC, OFFSET, LineStatus

    page = bytearray(4096)
    struct.pack_into("=Q", page, OFFSET["magic"], MAGIC)
    struct.pack_into("=Q", page, OFFSET["seq"], 7)  # odd: an update under way
    struct.pack_into("=Q", page, OFFSET["sent_frames"], 41)
    path = tmp_path / "status"
    path.write_bytes(bytes(page))
    status = LineStatus(path)
    try:
        with pytest.raises(RunError, match="mid-update"):
            status.read(timeout=0.2)

        def finish() -> None:  # the writer gets the CPU back 50 ms later and completes the update
            time.sleep(0.05)
            struct.pack_into("=Q", status.map, OFFSET["sent_frames"], 42)
            struct.pack_into("=Q", status.map, OFFSET["seq"], 8)

        t0 = time.monotonic()
        writer = threading.Thread(target=finish)
        writer.start()
        got = status.read(timeout=2.0)
        writer.join()
        assert got["sent_frames"] == 42 and got["seq"] == 8 and time.monotonic() - t0 >= 0.04
        assert len(got) == len(LAYOUT.unpack_from(status.map, 0))
    finally:
        status.close()


def test_two_lines_never_share_a_cpu(no_leftovers):
    """A second run's line takes a CPU no live line holds, or is refused (issue 32)."""
    from bufsize.topologies.errors import MachineError

    with Dumbbell(DumbbellConfig(hosts=1, rtt_ms=[1.0]), "delayline") as first:
        held = os.sched_getaffinity(first.delayline.proc.pid)
        assert len(held) == 1
        free = (os.sched_getaffinity(0) | held) - held
        line = DumbbellConfig(hosts=1, rtt_ms=[1.0], shaper="line")
        if len(free) >= 2:  # room for another line and the rest
            with Dumbbell(line, "delayline") as second:
                assert os.sched_getaffinity(second.delayline.proc.pid).isdisjoint(held)
        else:
            with pytest.raises(MachineError, match="needs a CPU of its own"):
                Dumbbell(line, "delayline").__enter__()
        assert first.delayline.alive()
