"""The ns-3 twin's run: what Experiment is on the emulated dumbbell, on the simulator.

An experiment drives either through the same steps (scaffold/runs.py): open the link with its flows,
warm up, trace fidelity, then finish into a result. Here time is simulated, so there is no CPU,
pacing-fidelity or leftover check; the run is deterministic for a seed, and the result names the
simulator, its version and the seed. The flows may start below the experiment's first buffer
(--start-buffer) to spare the simulator slow start's overshoot at high rates.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from bufsize.scaffold.experiment import GOOD_REFERENCE, Say
from bufsize.scaffold.link import SimulatedLink
from bufsize.scaffold.manifest import project_commit
from bufsize.scaffold.resultdir import write_json_atomic
from bufsize.scaffold.schema import stamp
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.errors import UsageError
from bufsize.topologies.nssim import HELPER, NS3_WHEEL, SimConfig, SimDumbbell, ns3_version
from bufsize.topologies.safefiles import make_dirs
from bufsize.topologies.units import digits

# Simulated seconds the warm-up may be extended while flows are still starting (SYN backoff 1+2+4+8+16).
MAX_START_S = 31.0
START_BUFFERS = ("calibration", "small")
MAX_SIM_BUFFER_PACKETS = 10_000_000  # the twin's FIFO has no kernel limit; this only catches a typo
FRESH_SEED_STRIDE = 100_003  # a prime: the k-th fresh start of seed s is far from any other search's seed
RTO_TEXT = {"linux": "srtt + max(4 rttvar, 200 ms)", "ns2": "max(1 s, srtt + 4 rttvar), 10 ms tick (ns-2's)"}


def simulator_manifest(cfg: SimConfig) -> dict:
    acks = "delayed ACK 2 segments or 40 ms" if cfg.delayed_ack else "every segment ACKed at once"
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "host": platform.node(),
        "python": platform.python_version(),
        "simulator": "ns-3",
        "ns3_version": ns3_version(),
        "ns3_wheel": NS3_WHEEL,
        "helper": HELPER.name,
        "seed": cfg.seed,
        "congestion_control": cfg.cc,
        "tcp": f"ns-3 TcpLinuxReno/TcpCubic/TcpBbr; SACK, timestamps, window scaling, IW {cfg.iw}, {acks}, PRR, "
        f"RTO {RTO_TEXT[cfg.rto]}; 1448-byte segments; "
        + ("every flow paced (1.2 x cwnd/rtt, at most the access rate)" if cfg.sender_pacing else "unpaced but BBR"),
        "project_commit": project_commit(),
    }


def check_start_buffer(choice: str) -> None:
    """--start-buffer: calibration, small, or a whole number of packets from 1."""
    if choice not in START_BUFFERS and not (digits(choice) and 1 <= int(choice) <= MAX_SIM_BUFFER_PACKETS):
        raise UsageError(f"--start-buffer {choice}: calibration, small, or packets from 1 to {MAX_SIM_BUFFER_PACKETS}")


def start_packets(choice: str, cal_packets: int, small_packets: int, flows: int) -> int:
    """The buffer the flows start at, never above the experiment's first buffer (`cal_packets`). Their
    slow start overshoots whatever it is; with a buffer of 2 BDP at 1 Gb/s that overshoot drops tens
    of thousands of packets at once, and ns-3's SACK bookkeeping recovers a window of W packets in W^2
    (docs/twin.md), so a large run starts small and lets congestion avoidance grow the windows into
    the larger buffer instead. `small` is `small_packets` (the first probe, or the smallest buffer
    measured) but at least one packet per flow, so that every flow's SYN and first window find room
    (bench/results/start-buffer/README.md)."""
    if choice == "calibration":
        return cal_packets
    if choice == "small":
        return min(max(small_packets, flows), cal_packets)
    return min(int(choice), cal_packets)


def hold_until_up(net: SimDumbbell, flows: int, warm_s: float) -> int:
    """Run fresh flows for `warm_s`, longer while any is not up (a SYN lost among hundreds of flows
    starting within a second costs a flow 1 s, then 2, 4, ...), as the emulation holds its flows;
    the late flows then get a warm-up of their own. How many came up."""
    net.run(warm_s)
    up = net.flows_up()
    while up < flows and net.sim_seconds < warm_s + MAX_START_S:
        net.run(1.0)
        up = net.flows_up()
    if net.sim_seconds > warm_s:
        net.run(warm_s)
    return up


class FreshLink(SimulatedLink):
    """The twin with its flows started afresh at each buffer a probe moves to, as a simulation that
    measures every buffer in a run of its own: a new simulator at that buffer, its flows held until
    all are up and warm as at the start; the probe's settle and samples follow as on the running twin
    (a re-check at the same buffer goes on in that run). Each start has a seed of its own, derived
    from the search's: with the same seed a re-check after another buffer would replay its first run."""

    def __init__(self, net: SimDumbbell, warm_s: Callable[[int], float]) -> None:
        super().__init__(net)
        self.warm_s = warm_s  # the warm-up at a buffer of so many bytes
        self.earlier_s = 0.0  # simulated in the runs before this one
        self.starts = 1
        self.all_up = True

    def set_buffer_bytes(self, buffer_bytes: int) -> None:
        self.earlier_s += self.net.sim_seconds
        self.net.close()
        seed = (self.cfg.seed - 1 + FRESH_SEED_STRIDE * self.starts) % 2**31 + 1
        self.net = SimDumbbell(replace(self.cfg, seed=seed), self.net.flows, buffer_bytes // FRAME_BYTES).__enter__()
        self.starts += 1
        self.all_up &= hold_until_up(self.net, self.net.flows, self.warm_s(buffer_bytes)) == self.net.flows


class TwinRun:
    """One experiment's simulator, from its first buffer (`buffer_bytes`: the calibration or warm-up
    buffer) to its result. The flows start at `start_buffer` (START_BUFFERS, or packets; `small_packets`
    is what `small` means for this experiment) and are grown into the first buffer during the warm-up;
    with `fresh_starts`, every buffer moved to is measured in a run of its own (FreshLink)."""

    recording = None  # the emulation's recorder's trace; the twin's queue comes with each sample
    cwnd_sums = None  # the senders' summed windows over a span; the twin does not trace them

    def __init__(self, cfg: SimConfig, kind: str, out: Path | None, say: Say, buffer_bytes: int, small_packets: int,
                 start_buffer: str = "calibration", fresh_starts: bool = False) -> None:  # fmt: skip
        self.cfg, self.kind, self.out, self.say = cfg, kind, out, say
        self.label = f"sim {kind}"
        self.first_packets = buffer_bytes // FRAME_BYTES
        self.start_buffer, self.fresh_starts = start_buffer, fresh_starts
        self.small_packets = small_packets
        self.start = self.first_packets
        self.link: SimulatedLink | None = None
        self.flows = self.up = self.up_at_end = 0
        self.simulated_s = 0.0
        self.t_wall = time.monotonic()
        # Experiment's hooks for a failed run's partial record: a simulation is rerun from its seed instead.
        self.partial: Callable[[], dict] = dict
        self.write_partial: Callable[[Path], None] | None = None

    def describe(self) -> str:
        return f", seed {self.cfg.seed} (ns-3 {ns3_version()})"

    def __enter__(self) -> TwinRun:
        self.t_wall = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.link is not None:
            net = self.link.net
            fresh = self.link if isinstance(self.link, FreshLink) else None
            self.simulated_s = net.sim_seconds + (fresh.earlier_s if fresh else 0.0)
            try:
                if exc[0] is None:
                    self.up_at_end = net.flows_up()
            finally:
                net.close()

    def open_link(self, flows: int, tool: str = "", note: Any = None, warm_s: Callable[[int], float] | None = None
                  ) -> SimulatedLink:  # fmt: skip
        """The simulator with `flows` long flows at the start buffer; `warm_s`, the warm-up at a buffer
        of so many bytes, serves fresh starts."""
        self.flows = flows
        self.start = start_packets(self.start_buffer, self.first_packets, self.small_packets, flows)
        if self.start != self.first_packets:
            self.say(f"  the flows start at {self.start} packets ({self.start_buffer}), not the {self.first_packets}-"
                     "packet warm-up buffer: their slow start overshoots that, and congestion avoidance then grows "
                     "them into the larger one")  # fmt: skip
        net = SimDumbbell(self.cfg, flows, self.start).__enter__()
        fresh = self.fresh_starts and warm_s is not None
        self.link = FreshLink(net, warm_s) if fresh else SimulatedLink(net)  # type: ignore[arg-type]
        return self.link

    def warm_up(self, seconds_at: Callable[[int], float], where: str = "") -> None:
        """Hold the flows until every one is up and warm at the start buffer, then grow them into the
        warm-up buffer where they started below it (seconds_at: the warm-up at a buffer of so many bytes)."""
        assert self.link is not None
        net = self.link.net
        self.up = hold_until_up(net, self.flows, seconds_at(net.buffer_bytes))
        self.say(f"  {self.up} of {self.flows} flows up after {net.sim_seconds:.1f} s at {self.start} packets")
        if self.start != self.first_packets:
            net.set_buffer(self.first_packets)
            grow = seconds_at(net.buffer_bytes)
            net.run(grow)
            self.say(f"  {grow:.1f} s at the {self.first_packets}-packet warm-up buffer, to {net.sim_seconds:.1f} s")

    def trace_fidelity(self, seconds: float) -> dict:
        return {}  # an exact FIFO at rate C: nothing to trace

    def clock_note(self, result: dict) -> str:
        return f"{result['simulated_seconds']:.0f} s simulated in {result['wall_seconds']:.0f} s"

    def finish(self, fields: dict, own_flags: dict[str, bool | None], reference_mbps: float | None,
               cpu_idle_min: float | None, options: dict, write_extra: Callable[[Path], None] | None = None
               ) -> dict:  # fmt: skip
        """The result: the experiment's fields and flags, the twin's own, then the simulator's manifest;
        result.json (and the experiment's files) written to `out`."""
        fresh = self.link if isinstance(self.link, FreshLink) else None
        flags = own_flags | {
            "reference_near_nominal": (
                reference_mbps >= GOOD_REFERENCE * self.cfg.rate_mbps if reference_mbps is not None else None
            ),
            "flows_held_until_all_up": self.up == self.flows and (fresh is None or fresh.all_up),
        }
        result = {
            "kind": f"sim-{self.kind}",
            "flows": self.flows,
            "flows_up": self.up_at_end,
            "hosts": self.cfg.hosts,
            "cc": self.cfg.cc,
            "seed": self.cfg.seed,
            "nominal_rate_mbps": self.cfg.rate_mbps,
            "reference_rate_mbps": round(reference_mbps, 3) if reference_mbps is not None else None,
            **fields,
            "start_buffer": self.start_buffer,
            "start_buffer_packets": self.start,
            "fresh_starts": fresh.starts if fresh else 0,  # simulator runs when each buffer starts afresh; 0: one
            "valid": all(v is not False for v in flags.values()),
            "flags": flags,
            "wall_seconds": round(time.monotonic() - self.t_wall, 1),
            "simulated_seconds": round(self.simulated_s, 1),
            "options": options,
            "config": self.cfg.to_dict(),
            "manifest": simulator_manifest(self.cfg),
        }
        result = stamp(result, "result")  # the same document whether written, printed or returned
        if self.out is not None:
            make_dirs(self.out)
            if write_extra is not None:
                write_extra(self.out)
            write_json_atomic(self.out / "result.json", result)
        return result
