"""The netem delay backend (and Open vSwitch) on Debian's stock kernel: runs only inside the VM stage.

tests/vm/stage.sh boots linux-image-amd64 under QEMU with the host's filesystem shared and runs
this file there (tests/vm/guest.sh sets BSZ_VM_GUEST=1). The host's `make test` deselects it
(-m "not vm"); run by hand on the host, it skips. Inside the guest nothing may be missing: a
kernel without netem fails here, it does not skip. The one skip is the OVS test where
openvswitch-switch is not installed on the host (the stage installs it unless BSZ_VM_OVS is
auto or 0).

Everything runs in this one process (Python starts slowly over 9p): the project's own API, as
`bufsize verify` uses it, at 5 Mb/s, a rate the emulated CPU sustains.

Tolerances are verify's own (min RTT within 1 % + 0.3 ms, rate 97..101 %), with one allowance when
the guest runs under software emulation (TCG, as on this machine, whose /dev/kvm cannot run a
stock kernel): the emulated CPU makes every hop slow. Measured here with the host otherwise idle:
a dumbbell set to 0 ms has a min RTT of 0.18-0.38 ms with netem and 0.56-1.06 ms with the delay line
(two AF_PACKET copies in userspace), against a few tens of us on hardware; set to 20 and 60 ms, min
RTT came out 0.49-0.93 ms (netem, Linux bridge or OVS) and 0.87-1.38 ms (delay line) above. So
under TCG the RTT check allows 1.0 ms (netem) or 1.5 ms (delay line) on top of verify's tolerance,
and prints verify's own verdict; under KVM it allows nothing and requires that verdict. Rate needs
no allowance at 5 Mb/s (measured 98.5-99.6 %); at 10 Mb/s the delay line fell to 96.7 % under TCG.
With the host's cores busy elsewhere the emulated path slows further (seen: 82-92 % of 10 Mb/s):
like the host's timing tests, this stage wants an otherwise idle machine.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import in_ns, ours

from buffersizing.verify import (
    RATE_HIGH,
    RATE_LOW,
    RTT_ABS_TOL_MS,
    RTT_REL_TOL,
    PingResult,
    measure_rate,
    measure_rtts,
    ping_host,
    summarize,
)
from topologies import FRAME_BYTES, netns, shaper, sysctl
from topologies.config import DumbbellConfig
from topologies.delay import HELPER, netem_commands
from topologies.dumbbell import OFFLOADS_OFF, Dumbbell, Host, tcp_sysctls
from topologies.machine import format_report, probe, qdisc_support, resolve_backend
from topologies.proc import run

pytestmark = [pytest.mark.vm, pytest.mark.integration]

IN_GUEST = os.environ.get("BSZ_VM_GUEST") == "1"
TCG = os.environ.get("BSZ_VM_ACCEL") == "tcg"
RTT_ALLOWANCE_MS = {"netem": 1.0, "delayline": 1.5} if TCG else {"netem": 0.0, "delayline": 0.0}
RATE_MBPS = 5.0
RTTS_MS = [20.0, 60.0]  # two hosts, two RTTs: each host's own delay must come out right
# The two backends must agree: min RTT per host within 1 ms + 2 %, rate within 3 % of configured.
AGREE_RTT_ABS_MS, AGREE_RTT_REL, AGREE_RATE = 1.0, 0.02, 0.03

VERIFY: dict[str, dict] = {}  # backend -> verify summary, for the comparison at the end


@pytest.fixture(autouse=True)
def guest_only():
    if not IN_GUEST:
        pytest.skip("runs only inside the VM stage (tests/vm/stage.sh, or make vm-test)")


@pytest.fixture
def show(capsys):
    """Print past pytest's capture: the measurements belong in the stage's output."""

    def _show(text: str) -> None:
        with capsys.disabled():
            print(f"\n  {text}", end="")

    return _show


def config(backend: str, **kw) -> DumbbellConfig:
    return DumbbellConfig(hosts=2, rate_mbps=RATE_MBPS, rtt_ms=list(RTTS_MS), delay_backend=backend, **kw)


def rtt_ok(configured_ms: float, min_ms: float, loss_pct: float, backend: str) -> bool:
    """verify's rule (PingResult.ok), with no loss at all, plus the emulation allowance."""
    tol = RTT_REL_TOL * configured_ms + RTT_ABS_TOL_MS + RTT_ALLOWANCE_MS[backend]
    return loss_pct == 0 and abs(min_ms - configured_ms) <= tol


def pings_ok(pings: list[PingResult], backend: str) -> bool:
    return all(rtt_ok(p.configured_ms, p.min_ms, p.loss_pct, backend) for p in pings)


def tc_time_ms(text: str) -> float:
    """tc's printed time ('10ms', '30.5ms', '500us', '1s') in ms."""
    m = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    assert m, f"unexpected tc time {text!r}"
    return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]


def netem_of(ns: str | None, dev: str) -> dict:
    """The netem qdisc on dev (ns None: this namespace): its line, delay (ms), rate and bytes sent."""
    argv = ["tc", "-s", "qdisc", "show", "dev", dev]
    out = run(netns.in_ns(ns, argv) if ns else argv).stdout
    m = re.search(r"^(qdisc netem 1: root .*)\n\s*Sent (\d+) bytes", out, re.M)
    assert m, f"no netem root qdisc on {dev} in {ns or 'the root namespace'}:\n{out}"
    line = m.group(1)
    delay = re.search(r" delay (\S+)", line)
    rate = re.search(r" rate (\S+)", line)
    return {
        "line": line,
        "delay_ms": tc_time_ms(delay.group(1)) if delay else 0.0,
        "rate": rate.group(1) if rate else None,
        "sent": int(m.group(2)),
    }


# ---- auto picks netem -------------------------------------------------------------------------


def test_auto_picks_netem_on_the_stock_kernel(show):
    caps = probe()
    show(format_report(caps).replace("\n", "\n  "))
    assert caps.qdiscs.get("netem"), f"kernel {caps.kernel} offers no sch_netem: the VM stage must have it"
    assert caps.delay_backend == "netem"
    assert resolve_backend("auto", caps.qdiscs, caps.delayline_built) == "netem"
    # Both backends can be forced here, which the comparison below relies on.
    assert resolve_backend("netem", caps.qdiscs, caps.delayline_built) == "netem"
    assert caps.delayline_built, f"{HELPER} is not built on the host (./setup.sh)"
    assert resolve_backend("delayline", caps.qdiscs, caps.delayline_built) == "delayline"
    assert caps.openvswitch_module, "the stock kernel should ship the openvswitch module"
    assert not caps.problems, caps.problems


# ---- verify from each backend -------------------------------------------------------------------


@pytest.mark.parametrize("requested", ["auto", "delayline"])
def test_verify_rtt_and_rate_within_tolerance(no_leftovers, show, requested):
    """What `bufsize verify --delay-backend <requested>` does (cli.run_verify), in this process."""
    cfg = config(requested)
    backend = resolve_backend(cfg.delay_backend, qdisc_support(), HELPER.exists())
    assert backend == ("netem" if requested == "auto" else requested)
    with Dumbbell(cfg, backend) as net:
        pings = measure_rtts(net)
        rate = measure_rate(net, duration=5.0)
        s = summarize(net, pings, rate)
    VERIFY[backend] = s
    show(
        f"verify ({requested} -> {backend}): RTT min {[p['min_ms'] for p in s['per_host']]} ms (set {RTTS_MS}), "
        f"rate {s['measured_rate_mbps']} Mb/s of {RATE_MBPS:g} ({s['rate_ratio']:.2%}); verify's own verdict: "
        f"{'OK' if s['ok'] else 'outside tolerance'}; emulation allowance on RTT {RTT_ALLOWANCE_MS[backend]} ms"
    )
    for p in s["per_host"]:
        ok = rtt_ok(p["configured_ms"], p["min_ms"], p["loss_pct"], backend)
        assert ok, f"h{p['host']}: {s['rtt_tolerance']} + {RTT_ALLOWANCE_MS[backend]} ms: {p}"
    assert s["rate_ok"], f"rate {s['measured_rate_mbps']} Mb/s of {RATE_MBPS}: {s['rate_tolerance']}"
    assert s["delayline_drops"] == 0
    if not TCG:
        assert s["ok"]


def test_netem_and_delayline_agree(show):
    missing = {"netem", "delayline"} - VERIFY.keys()
    if missing:
        pytest.fail(f"no verify result from {sorted(missing)} (its test failed or did not run)")
    netem, dl = VERIFY["netem"], VERIFY["delayline"]
    for a, b in zip(netem["per_host"], dl["per_host"], strict=True):
        allowed = AGREE_RTT_ABS_MS + AGREE_RTT_REL * a["configured_ms"]
        assert abs(a["min_ms"] - b["min_ms"]) <= allowed, f"h{a['host']}: netem {a} vs delay line {b}"
    diff = abs(netem["measured_rate_mbps"] - dl["measured_rate_mbps"]) / RATE_MBPS
    deltas = [f"{a['min_ms'] - b['min_ms']:+.3f}" for a, b in zip(netem["per_host"], dl["per_host"], strict=True)]
    show(f"netem - delay line: min RTT {', '.join(deltas)} ms; rate {diff:.2%} of configured")
    assert diff <= AGREE_RATE, f"rate: netem {netem['measured_rate_mbps']}, delay line {dl['measured_rate_mbps']}"


# ---- the netem dumbbell itself: where the delays are, buffer changes, teardown ----------------------


def test_netem_dumbbell_delays_survive_buffer_change_and_teardown_leaves_nothing(no_leftovers, show):
    cfg = config("netem", buffer_bytes=50 * FRAME_BYTES)
    backlog_before = sysctl.read("net.core.netdev_max_backlog")
    with Dumbbell(cfg, "netem") as net:
        assert net.delay_ns is None and net.delayline is None
        # Half of each host's RTT on its own egress (with the 1 Gb/s access rate), half on the
        # switch port toward it; none on the bottleneck.
        where = [(h.ns, h.dev, h) for h in net.hosts] + [(net.switch_ns, f"s1-eth{h.index}", h) for h in net.hosts]
        for ns, dev, h in where:
            q = netem_of(ns, dev)
            assert abs(q["delay_ms"] - h.rtt_ms / 2) < 0.001, (dev, q)
            assert q["rate"] == ("1Gbit" if dev == h.dev else None), (dev, q)
        bottleneck = in_ns(net.switch_ns, "tc", "qdisc", "show", "dev", net.bottleneck.dev)
        assert "netem" not in bottleneck
        assert re.search(r"qdisc htb 1: root", bottleneck), bottleneck
        assert f"qdisc bfifo 10: parent 1:1 limit {50 * FRAME_BYTES}b" in bottleneck
        rtts = measure_rtts(net)
        assert pings_ok(rtts, "netem"), rtts

        before = {(ns, dev): netem_of(ns, dev) for ns, dev, _ in where}
        net.set_buffer(7 * FRAME_BYTES)
        bottleneck = in_ns(net.switch_ns, "tc", "qdisc", "show", "dev", net.bottleneck.dev)
        assert f"qdisc bfifo 10: parent 1:1 limit {7 * FRAME_BYTES}b" in bottleneck, bottleneck
        for (ns, dev), q0 in before.items():
            q1 = netem_of(ns, dev)
            assert q1["line"] == q0["line"], f"netem on {dev} changed: {q0['line']!r} -> {q1['line']!r}"
            # Same qdisc, not an equal new one: its counters kept counting.
            assert q1["sent"] >= q0["sent"] > 0, (dev, q0, q1)
        after = measure_rtts(net)
        assert pings_ok(after, "netem"), after
        show(
            f"netem dumbbell: RTT min {[p.min_ms for p in rtts]} ms before the buffer change, "
            f"{[p.min_ms for p in after]} ms after"
        )
        namespaces, state = net.namespaces, net.state
    # Teardown: namespaces (and with them every veth and qdisc), run state, global sysctls.
    assert not [n for n in namespaces if netns.exists(n)]
    assert not state.path.exists() and not state.workdir.exists()
    assert sysctl.read("net.core.netdev_max_backlog") == backlog_before
    assert "netem" not in run(["tc", "qdisc", "show"]).stdout
    assert not [n for n in ours() if n.startswith(f"{netns.PREFIX}{state.run_id}-")]


# ---- Open vSwitch -----------------------------------------------------------------------------------

OVS_CTL = "/usr/share/openvswitch/scripts/ovs-ctl"
OVS_BRIDGE = "bszovs0"


@pytest.fixture
def ovs():
    """ovs-vswitchd running in the guest (it starts nothing on the host: the guest's /etc and /var are overlays)."""
    wanted = os.environ.get("BSZ_VM_OVS")  # stage.sh: 1 (installed), missing, or 0 (turned off)
    if wanted == "0":
        pytest.skip("OVS test turned off (BSZ_VM_OVS=0)")
    if not (shutil.which("ovs-vsctl") and Path(OVS_CTL).exists()):
        msg = "openvswitch-switch is not installed on the host (BSZ_VM_OVS=1 tests/vm/stage.sh installs it)"
        if wanted == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    run(["modprobe", "openvswitch"])
    run([OVS_CTL, "start", "--system-id=random", "--no-monitor"], timeout=120)
    try:
        yield
    finally:
        run(["ovs-vsctl", "--if-exists", "del-br", OVS_BRIDGE], check=False)
        run([OVS_CTL, "stop"], check=False, timeout=60)


def test_ovs_switch_with_netem_delays(no_leftovers, ovs, show):
    """The dumbbell's netem placement around an OVS bridge: RTT, rate, buffer change, teardown.

    Not the Dumbbell class (whose switch is a Linux bridge plus an IP hop): a plain OVS L2 switch in
    the guest's root namespace, hosts and receiver in namespaces, netem half-RTT on each host's
    egress and on the OVS port toward it, the bottleneck (HTB + bfifo) on the port to the receiver.
    """
    base = f"{netns.PREFIX}ovs{os.getpid() % 10000}-"
    recv_ip, recv_mac = "10.0.0.1", "02:bf:00:00:00:01"
    hosts = [
        Host(i, f"{base}h{i}", f"h{i}-eth0", f"10.0.1.{i}", f"02:bf:00:01:00:{i:02x}", rtt)
        for i, rtt in enumerate(RTTS_MS, start=1)
    ]
    recv_ns, recv_port = f"{base}r1", "bszo-r1"
    all_ns = [recv_ns, *(h.ns for h in hosts)]
    procs: list[subprocess.Popen] = []
    try:
        netns.add_many(all_ns)
        run(["ovs-vsctl", "add-br", OVS_BRIDGE, "--", "set", "bridge", OVS_BRIDGE, "fail-mode=standalone"])
        run(["ip", "link", "set", OVS_BRIDGE, "up"])
        ends = [(recv_ns, "r1-eth0", recv_mac, recv_ip, recv_port)]
        ends += [(h.ns, h.dev, h.mac, h.ip, f"bszo-h{h.index}") for h in hosts]
        for ns, dev, mac, ip, port in ends:
            run(["ip", "link", "add", port, "type", "veth", "peer", "name", dev, "address", mac, "netns", ns])
            run(["ovs-vsctl", "add-port", OVS_BRIDGE, port])
            run(["ethtool", "-K", port, *OFFLOADS_OFF])
            run(["ip", "link", "set", port, "up"])
            run(netns.in_ns(ns, ["ethtool", "-K", dev, *OFFLOADS_OFF]))
            batch = f"link set lo up\nlink set {dev} up\naddr add {ip}/16 dev {dev}\n"
            peers = [(h.ip, h.mac) for h in hosts] if ns == recv_ns else [(recv_ip, recv_mac)]
            batch += "".join(f"neigh replace {pip} lladdr {pmac} dev {dev} nud permanent\n" for pip, pmac in peers)
            run(["ip", "-n", ns, "-batch", "-"], input=batch)
            run(netns.in_ns(ns, ["sysctl", "-q", "-w", *tcp_sysctls("reno")]))
        root_tc = shaper.build_commands(recv_port, "htb", RATE_MBPS, 50 * FRAME_BYTES, FRAME_BYTES)
        for h in hosts:
            one_way = int(round(h.rtt_ms * 500))
            run(["tc", "-n", h.ns, "-batch", "-"], input="".join(netem_commands(h.dev, one_way, 1000.0)))
            root_tc += netem_commands(f"bszo-h{h.index}", one_way, None)
        run(["tc", "-batch", "-"], input="".join(root_tc))

        net = SimpleNamespace(receiver_ip=recv_ip)
        pings = [ping_host(net, h, 20, 0.05) for h in hosts]  # verify's own ping
        assert pings_ok(pings, "netem"), pings

        # Rate: one reno flow per host for 2 s of warm-up and 5 s of counting at the bottleneck port.
        procs.append(subprocess.Popen(netns.in_ns(recv_ns, ["iperf", "-s", "-p", "5001"]), stdout=subprocess.DEVNULL))
        time.sleep(0.5)
        for h in hosts:
            argv = ["iperf", "-c", recv_ip, "-p", "5001", "-t", "30", "-Z", "reno"]
            procs.append(subprocess.Popen(netns.in_ns(h.ns, argv), stdout=subprocess.DEVNULL))
        tx = Path(f"/sys/class/net/{recv_port}/statistics/tx_bytes")
        time.sleep(2.5)
        t0, b0 = time.monotonic(), int(tx.read_text())
        time.sleep(5.0)
        t1, b1 = time.monotonic(), int(tx.read_text())
        ratio = (b1 - b0) * 8 / (t1 - t0) / 1e6 / RATE_MBPS
        before = {p: netem_of(None, p) for p in ("bszo-h1", "bszo-h2")}
        before |= {h.dev: netem_of(h.ns, h.dev) for h in hosts}
        # The buffer, changed in place under the running flows (shaper.set_buffer, in the root namespace).
        run(
            [
                "tc",
                "qdisc",
                "change",
                "dev",
                recv_port,
                "parent",
                "1:1",
                "handle",
                "10:",
                "bfifo",
                "limit",
                str(7 * FRAME_BYTES),
            ]
        )
        for p in procs:
            p.kill()
            p.wait()
        procs.clear()
        show(f"OVS: RTT min {[p.min_ms for p in pings]} ms (set {RTTS_MS}), rate {ratio:.2%} of {RATE_MBPS:g} Mb/s")
        assert RATE_LOW <= ratio <= RATE_HIGH, f"rate {ratio:.2%} of {RATE_MBPS} Mb/s"
        assert (
            f"qdisc bfifo 10: parent 1:1 limit {7 * FRAME_BYTES}b"
            in run(["tc", "qdisc", "show", "dev", recv_port]).stdout
        )
        for dev, q0 in before.items():
            ns = next((h.ns for h in hosts if h.dev == dev), None)
            assert netem_of(ns, dev)["line"] == q0["line"], dev
        pings = [ping_host(net, h, 20, 0.05) for h in hosts]
        assert pings_ok(pings, "netem"), pings
        assert OVS_BRIDGE in run(["ovs-vsctl", "list-br"]).stdout
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for ns in all_ns:
            netns.delete(ns)
        run(["ovs-vsctl", "--if-exists", "del-br", OVS_BRIDGE], check=False)
    # Teardown: the namespaces took the veths (and the OVS ports' devices) with them.
    assert not [n for n in all_ns if netns.exists(n)]
    assert run(["ovs-vsctl", "list-br"]).stdout.strip() == ""
    links = run(["ip", "-o", "link", "show"]).stdout
    assert "bszo-" not in links and OVS_BRIDGE not in links
    assert "netem" not in run(["tc", "qdisc", "show"]).stdout
