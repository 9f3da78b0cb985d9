"""Mininet users at home: the adapter's API, `bufsize shell` and `mn --custom` on real namespaces."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import bufsize

from bufsize.mininet.adapter import make_view
from bufsize.topologies.config import DumbbellConfig
from bufsize.topologies.dumbbell import Dumbbell
from bufsize.topologies.ledger import RunState
from bufsize.topologies.machine import delay_backend, qdisc_support
from bufsize.topologies.units import packets_to_bytes

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parent.parent
CUSTOM = REPO / "topologies" / "mn_dumbbell.py"
# Mininet.init() raises these global limits when `mn` starts; the test puts them back.
MN_SYSCTLS = [
    "fs.file-max",
    "net.core.wmem_max",
    "net.core.rmem_max",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.core.netdev_max_backlog",
    "net.ipv4.neigh.default.gc_thresh1",
    "net.ipv4.neigh.default.gc_thresh2",
    "net.ipv4.neigh.default.gc_thresh3",
    "kernel.pty.max",
]


def ping_times(text: str) -> list[float]:
    return [float(t) for t in re.findall(r"time=([\d.]+) ms", text)]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_adapter_runs_mininet_api_in_the_toolkits_namespaces(no_leftovers):
    cfg = DumbbellConfig(hosts=2, rtt_ms=[20.0, 20.0], rate_mbps=10.0)
    with Dumbbell(cfg, delay_backend("auto")) as net:
        with make_view(net) as view:
            assert sorted(view.keys()) == sorted(["h1", "h2", "s1", "r1"] + (["d1"] if net.delay_ns else []))
            h1, r1 = view.get("h1", "r1")
            assert h1.IP() == net.hosts[0].ip and r1.IP() == net.receiver_ip
            # The shell really is in the toolkit's namespace: its interface list is the host's.
            assert net.hosts[0].dev in h1.cmd("ip -o link show")
            assert r1.defaultIntf().updateIP() == net.receiver_ip
            times = ping_times(h1.cmd(f"ping -n -c 2 -i 0.2 {r1.IP()}"))
            assert len(times) == 2 and all(t >= 20.0 for t in times), times
            out, _err, code = h1.pexec(["ip", "-o", "addr", "show", "dev", net.hosts[0].dev])
            assert code == 0 and net.hosts[0].ip in out
            shells = [n.pid for n in view.values()]
            recorded = {p["pid"] for p in RunState.load(net.state.path).processes}
            assert set(shells) <= recorded  # in the ledger: a killed run's shells are ended by clean
        assert not any(alive(p) for p in shells)
        after = {p["pid"] for p in RunState.load(net.state.path).processes}
        assert not set(shells) & after


def test_shell_pings_changes_the_buffer_monitors_and_leaves_nothing(no_leftovers):
    script = "h1 ping -c 2 r1\nbuffer 50\nbuffer 0\nmonitor 0.5\n"
    res = bufsize("shell", "--hosts", "2", "--rtt-ms", "20", "--rate-mbps", "10", input=script, timeout=120)
    assert res.returncode == 0, res.stderr
    times = ping_times(res.stdout)
    assert len(times) == 2 and all(t >= 20.0 for t in times), res.stdout
    assert f"bottleneck buffer: {packets_to_bytes(50)} bytes (50 packets)" in res.stdout, res.stdout
    assert "*** buffer 0:" in res.stdout  # refused, and the shell went on
    rows = [ln.split() for ln in res.stdout.splitlines() if re.fullmatch(r"\s*[\d.]+( +[\d.]+){4}\s*", ln)]
    assert 3 <= len(rows) <= 6, res.stdout  # 0.5 s at one row per 0.1 s
    assert all(float(r[1]) <= 10.0 * 1.05 for r in rows)  # rate never above the shaper's


def test_shell_refuses_bad_topology_options_before_building(no_leftovers):
    res = bufsize("shell", "--hosts", "0", input="", timeout=30)
    assert res.returncode == 2 and "--hosts 0" in res.stderr


@pytest.fixture
def mn_sysctls_restored():
    saved = {k: Path("/proc/sys", *k.split(".")).read_text() for k in MN_SYSCTLS}
    yield
    for k, v in saved.items():
        Path("/proc/sys", *k.split(".")).write_text(v)


def mn(*args: str, script: str = "") -> subprocess.CompletedProcess[str]:
    if shutil.which("mn") is None:
        pytest.fail("mn is not installed: ./setup.sh installs Debian's mininet")
    argv = ["mn", "--custom", str(CUSTOM), *args, "--controller", "none"]
    return subprocess.run(argv, input=script, capture_output=True, text=True, timeout=120)


def test_mn_custom_builds_the_bottleneck_tree(no_leftovers, mn_sysctls_restored):
    res = mn(
        "--topo",
        "dumbbell,hosts=2,rtt_ms=0,rate_mbps=10,buffer_packets=30",
        script=("h1 ping -c 2 r1\ns1 tc qdisc show\n"),
    )
    assert res.returncode == 0, res.stderr
    shown = res.stderr  # mn's CLI logs command output to stderr
    assert len(ping_times(shown)) == 2, shown
    qdiscs = shown
    limit = packets_to_bytes(30)
    assert re.search(r"qdisc htb 1: .*root", qdiscs) and re.search(rf"qdisc bfifo 10: .*limit {limit}b", qdiscs), qdiscs


def test_mn_custom_with_mininets_own_switch_in_front_of_the_router(no_leftovers, mn_sysctls_restored):
    # l2switch=1: the senders' LAN is Mininet's switch, the router g1 behind it. This kernel has no
    # Open vSwitch module, so Mininet's Linux bridge class stands in (the VM stage runs it on OVS).
    res = mn(
        "--topo",
        "dumbbell,hosts=3,rtt_ms=0,rate_mbps=10,buffer_packets=30,l2switch=1",
        "--switch",
        "lxbr",
        script=("h3 ping -c 2 r1\ng1 tc qdisc show\nsh ip -br link show s1\ng1 ip -br addr show\n"),
    )
    assert res.returncode == 0, res.stderr
    shown = res.stderr
    assert len(ping_times(shown)) == 2, shown
    assert re.search(rf"qdisc bfifo 10: dev g1-eth\d+ .*limit {packets_to_bytes(30)}b", shown), shown
    # The router's addresses sit on the right ports: the LAN's on its bridge, the receiver side's on
    # the port that carries the bottleneck (the one with the bfifo).
    wan = re.search(r"qdisc bfifo 10: dev (g1-eth\d+)", shown).group(1)
    assert re.search(rf"\b{wan}\S*\s+UP\s+10\.2\.0\.254/24", shown), shown
    assert re.search(r"\bbr0\s+UP\s+10\.1\.255\.254/16", shown), shown
    # The switch is a bridge in the root namespace (`sh` output goes to mn's stdout).
    assert re.search(r"\bs1\s+UP\b", res.stdout), res.stdout
    gone = subprocess.run(["ip", "link", "show", "s1"], capture_output=True, text=True)
    assert gone.returncode != 0, gone.stdout  # Mininet removed its bridge when it stopped


def test_mn_custom_delay_without_netem_is_refused_in_one_line(no_leftovers, mn_sysctls_restored):
    if qdisc_support()["netem"]:
        res = mn("--topo", "dumbbell,hosts=2,rtt_ms=20", script="h1 ping -c 2 r1\n")
        times = ping_times(res.stderr)
        assert res.returncode == 0 and len(times) == 2 and all(t >= 20.0 for t in times), res.stderr
        return
    res = mn("--topo", "dumbbell,hosts=2,rtt_ms=20")
    assert res.returncode == 1, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert lines[-1].startswith("mn --custom dumbbell: dumbbell: delay 10.0ms needs the netem qdisc"), res.stderr
    assert "Caught exception" not in res.stderr  # mn's handler (and its kill-by-pattern cleanup) never ran
