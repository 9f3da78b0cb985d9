"""Which link an experiment runs on: the emulated dumbbell (Experiment) or the ns-3 twin (TwinRun).

An experiment is written once, against LinkRun: it asks its link for a run at its first buffer,
opens the link with its flows, warms them up, traces fidelity, samples through the link's verbs
(scaffold/link.py) and finishes into a result. Nothing in it asks which link it has; where the two
differ (a wall or simulated clock, the machine's checks, the simulator's seed), the run says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from bufsize.scaffold.experiment import Experiment, Say, stderr_say
from bufsize.scaffold.link import LinkSpec, SampledLink
from bufsize.scaffold.twin import MAX_SIM_BUFFER_PACKETS, TwinRun, check_start_buffer
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.config import DumbbellConfig
from bufsize.topologies.errors import UsageError
from bufsize.topologies.nssim import SimConfig
from bufsize.topologies.units import check_buffer_bytes
from bufsize.traffic.longflows import split_flows


class LinkRun(Protocol):
    """One experiment's run on a link, from its build to its result (Experiment, TwinRun)."""

    cfg: Any  # the run's LinkSpec
    say: Say
    label: str  # how the run's first line names the experiment
    recording: Any  # the whole trace, read after the run (the emulation's recorder; None on the twin)
    cwnd_sums: Callable[[float, float], list[float]] | None  # summed windows over a span, where traced
    partial: Callable[[], dict]  # the experiment's data so far, saved if the run fails
    write_partial: Callable[[Path], None] | None

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: Any) -> None: ...

    def describe(self) -> str:
        """What the run's first line adds about the link."""
        ...

    def open_link(self, flows: int, tool: str = "iperf", note: Callable[[Any], str] = ...,
                  warm_s: Callable[[int], float] | None = None) -> SampledLink: ...  # fmt: skip

    def warm_up(self, seconds_at: Callable[[int], float], where: str = "") -> None: ...

    def trace_fidelity(self, seconds: float) -> dict: ...

    def clock_note(self, result: dict) -> str:
        """How long the run took, for its last line."""
        ...

    def finish(self, fields: dict, own_flags: dict[str, bool | None], reference_mbps: float | None,
               cpu_idle_min: float | None, options: dict, write_extra: Callable[[Path], None] | None = None
               ) -> dict: ...  # fmt: skip


@dataclass
class Emulated:
    """The emulated dumbbell with this delay backend; results and monitor data to `out`."""

    backend: str
    out: Path | None = None
    say: Say | None = None

    def validate(self, cfg: LinkSpec, flows: int) -> None:
        split_flows(flows, 1)  # at most the flows one machine can emulate

    def check_buffer(self, buffer_bytes: int, name: str = "buffer") -> None:
        check_buffer_bytes(buffer_bytes, name)

    def run(self, cfg: LinkSpec, kind: str, buffer_bytes: int, small_packets: int = 0,
            require_recorder: bool = False) -> Experiment:  # fmt: skip
        """The run of `kind`, its dumbbell built at `buffer_bytes` (`small_packets` means nothing here)."""
        assert isinstance(cfg, DumbbellConfig)
        built = replace(cfg, buffer_bytes=buffer_bytes)
        return Experiment(built, self.backend, kind, self.out, self.say, require_recorder, saves_result=True)


@dataclass
class Simulated:
    """The ns-3 twin; its flows start at `start_buffer` (scaffold/twin.py START_BUFFERS), every buffer
    in a run of its own with `fresh_starts`; result.json to `out`."""

    out: Path | None = None
    say: Say = stderr_say
    start_buffer: str = "calibration"
    fresh_starts: bool = False

    def validate(self, cfg: LinkSpec, flows: int) -> None:
        assert isinstance(cfg, SimConfig)
        cfg.validate(flows)  # the twin's own limit on N, not the flows one machine can emulate
        check_start_buffer(self.start_buffer)

    def check_buffer(self, buffer_bytes: int, name: str = "buffer") -> None:
        packets = buffer_bytes // FRAME_BYTES
        if not 1 <= packets <= MAX_SIM_BUFFER_PACKETS:
            raise UsageError(f"{name} {packets} packets: must be from 1 to {MAX_SIM_BUFFER_PACKETS}")

    def run(self, cfg: LinkSpec, kind: str, buffer_bytes: int, small_packets: int = 0,
            require_recorder: bool = False) -> TwinRun:  # fmt: skip
        """The run of `kind`, its flows grown into `buffer_bytes` from the start buffer (`small_packets`:
        what a small start means for this experiment); the twin always has its queue trace."""
        assert isinstance(cfg, SimConfig)
        return TwinRun(cfg, kind, self.out, self.say, buffer_bytes, small_packets, self.start_buffer, self.fresh_starts)


OnLink = Emulated | Simulated
