"""--sender-pacing: each long flow's socket gets SO_MAX_PACING_RATE (which turns on TCP's own pacing,
no fq) on the real senders, the short flows' too; the option travels through sweeps, resumes and
titles, and sweeps made before it resume as unpaced."""

from __future__ import annotations

import json
import socket
from types import SimpleNamespace

import pytest
from conftest import spec_of

from bufsize.cli import build_parser
from bufsize.topologies.config import DumbbellConfig, pacing_cap_bps, tcp_changes
from bufsize.topologies.dumbbell import Dumbbell
from bufsize.topologies.errors import UsageError
from bufsize.traffic.generator import SO_MAX_PACING_RATE
from bufsize.traffic.longflows import LongFlows

UNSET = 2**64 - 1  # the kernel's ~0UL: no cap, no pacing asked


def test_the_cap_is_the_access_rate_or_ten_times_the_bottleneck_where_unshaped():
    assert pacing_cap_bps(1000.0, 62.5) == 1_000_000_000
    assert pacing_cap_bps(100.0, 62.5) == 100_000_000
    assert pacing_cap_bps(0.0, 62.5) == 625_000_000


@pytest.mark.parametrize("tool", ["iperf", "iperf3"])
def test_the_traffic_generators_ask_for_pacing_only_when_told(tool):
    def argv(pacing: bool) -> list[str]:
        cfg = DumbbellConfig(hosts=1, rtt_ms=[87.0], access_mbps=250.0, sender_pacing=pacing)
        net = SimpleNamespace(cfg=cfg, hosts=[SimpleNamespace(rtt_ms=87.0)])
        return LongFlows(net, 2, tool)._pacing_argv()

    assert argv(False) == []
    assert argv(True) == ["--fq-rate", "250000000"]


def test_the_option_reaches_the_config_the_sweep_its_title_and_an_old_sweep_resumes_unpaced(tmp_path):
    from bufsize.longlived.sweep import existing_manifest

    paced = spec_of("--flows", "200,800", "--sender-pacing", "on")
    assert paced.sender_pacing and paced.config(200).sender_pacing
    assert not spec_of("--flows", "200").sender_pacing
    assert "senders paced by TCP" in paced.config(800).tcp_changes()
    assert tcp_changes() == [] and tcp_changes(sender_pacing=True) == ["senders paced by TCP"]
    with pytest.raises(UsageError, match="--sender-pacing"):
        DumbbellConfig(sender_pacing="yes").validate()  # type: ignore[arg-type]
    # A sweep written before the option: no key, and it ran unpaced; asked paced, it is another sweep.
    unpaced = spec_of("--flows", "200,800")
    old = unpaced.to_dict()
    del old["sender_pacing"]
    (tmp_path / "manifest.json").write_text(json.dumps({"spec": old, "machine": {"shaper": "line"}}))
    assert existing_manifest(tmp_path, unpaced) is not None
    with pytest.raises(UsageError, match="different settings \\(sender_pacing\\)"):
        existing_manifest(tmp_path, paced)


def test_the_kernel_keeps_the_cap_a_short_flow_socket_is_given():
    """What the short-flow generator sets on each transfer's socket, read back (no traffic)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        assert s.getsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE) & 0xFFFFFFFF == 0xFFFFFFFF  # none set
        s.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, pacing_cap_bps(1000.0, 62.5) // 8)
        assert s.getsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE) == 125_000_000


@pytest.mark.integration
@pytest.mark.parametrize(("tool", "pacing"), [("iperf", True), ("iperf", False), ("iperf3", True)])
def test_every_long_flow_socket_on_the_senders_carries_the_cap_when_paced(no_leftovers, tool, pacing):
    # HTB: the bottleneck does not matter here, and HTB needs no CPU of its own (the line does).
    cfg = DumbbellConfig(
        hosts=2, rate_mbps=20, rtt_ms=[10.0, 10.0], access_mbps=100.0, shaper="htb", sender_pacing=pacing
    )
    with Dumbbell(cfg, "delayline") as net, LongFlows(net, 4, tool) as flows:
        caps = flows.max_pacing_rates()
        flows.check()
    if tool == "iperf3":  # its control connection per client is among them, never paced
        assert len(caps) == 4 + 2 and caps.count(UNSET) == 2, caps
        caps = [c for c in caps if c != UNSET] if pacing else caps[:4]
    assert caps == [100_000_000 // 8] * 4 if pacing else caps == [UNSET] * 4, caps


def test_the_twin_takes_the_option_into_its_config_and_sweep_and_old_twin_sweeps_resume_unpaced(tmp_path):
    from bufsize.cli.sim import sim_config
    from bufsize.longlived.sweep import open_sweep
    from bufsize.scaffold.cluster import Where
    from bufsize.sim.sweep import SimSweepSpec, twin_runner
    from bufsize.topologies.nssim import SimConfig, SimDumbbell

    for argv in (["sim", "search", "--flows", "10"], ["sim", "measure", "--flows", "10", "--buffer-packets", "9"]):
        a = build_parser().parse_args([*argv, "--sender-pacing", "on"])
        cfg = sim_config(a, 10, 10, 1)
        assert cfg.sender_pacing
        args = SimDumbbell.args(SimSimple(cfg))
        assert args[args.index("--pacing") + 1] == "1"
    assert not sim_config(build_parser().parse_args(["sim", "search", "--flows", "10"]), 10, 10, 1).sender_pacing
    spec = SimSweepSpec([10], 1, 400, 62.5, "87", "reno", 1000.0)
    old = spec.to_dict()
    del old["sender_pacing"]
    (tmp_path / "manifest.json").write_text(json.dumps({"spec": old}))
    open_sweep(tmp_path, spec, twin_runner(spec, Where()))  # resumes
    spec.sender_pacing = True
    assert spec.config(10, 1) == SimConfig(10, 62.5, [87.0] * 10, "reno", 1000.0, 1, sender_pacing=True)
    with pytest.raises(UsageError, match="sender_pacing"):
        open_sweep(tmp_path, spec, twin_runner(spec, Where()))


class SimSimple:
    """Just what SimDumbbell.args reads."""

    def __init__(self, cfg: object) -> None:
        self.cfg, self.flows, self.buffer_packets = cfg, 10, 9


@pytest.mark.parametrize("cap", [0, 125_000_000])
def test_the_short_flow_generator_sets_the_cap_on_each_transfer_socket_when_asked(tmp_path, cap):
    """Generator.send on a transfer to a closed loopback port (refused at once: no traffic): the socket
    it made carried the cap (or none) when it was closed."""
    import asyncio

    from bufsize.traffic.generator import Generator, Transfer
    from bufsize.traffic.workload import Workload

    seen: list[int] = []

    class Recording(socket.socket):
        def close(self) -> None:
            seen.append(self.getsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE) & 0xFFFFFFFF)
            super().close()

    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    workload = Workload(sizes="fixed:10", load=0.8, transfers=10).to_dict()
    spec = {"workload": workload, "senders": [], "receiver_ip": "127.0.0.1", "port": port,
            "records": str(tmp_path / "t.csv"), "pacing_cap_bps": cap * 8}  # fmt: skip
    gen = Generator(spec)
    gen.sockets.socket = lambda ns: Recording(socket.AF_INET, socket.SOCK_STREAM)  # type: ignore[method-assign]
    try:
        asyncio.run(gen.send(Transfer(1, "open", -1, "h1", 100_000, t_planned=0.0), "unused"))
    finally:
        gen.rows.close()
        gen.sockets.close()
    assert seen == [cap or 0xFFFFFFFF]


def test_the_twins_paced_senders_offer_fewer_packets_back_to_back():
    """The same simulated dumbbell (10 Reno flows, 10 Mb/s, 20 ms, 100 Mb/s access links, 40 packets
    of buffer) unpaced and paced: a paced flow spaces its segments by srtt / (1.2 cwnd), so fewer
    arrivals at the bottleneck follow the one before by less than two access-link frame times."""
    from bufsize.topologies.nssim import SimConfig, SimDumbbell

    def back_to_back(paced: bool) -> float:
        cfg = SimConfig(10, 10.0, [20.0] * 10, "reno", 100.0, seed=1, sender_pacing=paced)
        with SimDumbbell(cfg, 10, 40) as net:
            net.run(5.0)
            t = net.arrivals(3.0)
        gaps = [b - a for a, b in zip(t, t[1:], strict=False)]
        assert len(gaps) > 1000  # about 2600 frames in 3 s at 10 Mb/s, more with drops
        return sum(g < 2 * 1514 * 8 / 100e6 for g in gaps) / len(gaps)

    unpaced, paced = back_to_back(False), back_to_back(True)
    assert paced < 0.5 * unpaced, (unpaced, paced)
