"""The scaffold every experiment on the dumbbell shares: build, traffic, monitors, flags, result directory.

    with Experiment(cfg, backend, "search", out, say) as ex:   # builds; drop monitor on
        flows = ex.start_flows(n, tool)                        # flows up; recorder on
        ex.warm_up(lambda buffer_bytes: seconds)
        ex.trace_fidelity(seconds)
        ... the experiment's own measurements ...
    result = ex.finish(fields, flags, reference=..., cpu_idle_min=...)   # common flags, manifest, files

On the way out (normally or not) the recorder, the flows and the drop monitor stop in that order,
then the dumbbell is torn down. If the block raised and there is an output directory, the data
recorded so far and an error.json are written before the exception goes on.
"""

from __future__ import annotations

import math
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bufsize.monitors.drops import DropMonitor, DropSummary
from bufsize.monitors.fidelity import MIN_BUSY_GAPS, FidelityMonitor
from bufsize.monitors.plots import plot_run, write_fidelity_csv
from bufsize.monitors.recorder import Recorder, Recording, summary, write_csvs
from bufsize.scaffold.cautions import cautions
from bufsize.scaffold.link import EmulatedLink
from bufsize.scaffold.manifest import machine_manifest
from bufsize.scaffold.projectfiles import FIDELITY_2012
from bufsize.scaffold.resultdir import write_json_atomic
from bufsize.scaffold.schema import stamp
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.cleanup import SignalsDeferred, find_leftovers
from bufsize.topologies.config import MAX_RATE_MBPS, DumbbellConfig, line_capacity_warning, shaper_choice
from bufsize.topologies.description import pacing_applies
from bufsize.topologies.dumbbell import Dumbbell
from bufsize.topologies.errors import RunError, UsageError
from bufsize.topologies.ledger import live_runs
from bufsize.topologies.proc import sleep_checked
from bufsize.topologies.safefiles import make_dirs
from bufsize.traffic.longflows import FlowStart, LongFlows

GOOD_REFERENCE = 0.97  # of the nominal rate: below this the result is flagged
MAX_FIDELITY_GT10 = 0.10  # fraction of gaps >10 % off ideal above which pacing is flagged (2012: 6-8 %)
MIN_QUEUE_HZ = 90  # the queue monitor is meant to run at 100 Hz; below this it fell behind

MAX_FIDELITY_S = 60.0
MAX_WAIT_S = 600.0  # longest --settle-s, --sample-s and --reference-s
# Rates are read from interface counters: a sample much shorter than 100 ms is mostly the jitter
# of the reads themselves.
MIN_SAMPLE_S = 0.1

Say = Callable[[str], None]


def line_lost(stats0: dict, stats1: dict) -> dict | None:
    """Late wake-ups of the line shaper beyond its catch-up allowance between two snapshots of the
    delay line's counters: capacity it lost (None: no line shaper)."""
    line0, line1 = stats0.get("line", {}), stats1.get("line", {})
    if not (line0 and line1):
        return None
    lost_ms = (line1.get("lost_ns", 0) - line0.get("lost_ns", 0)) / 1e6
    return {"clock_resets": line1["clock_resets"] - line0["clock_resets"], "lost_ms": round(lost_ms, 3)}


def stderr_say(s: str) -> None:
    print(s, file=sys.stderr, flush=True)


def check_fidelity_s(seconds: float) -> None:
    """--fidelity-s: 0 skips the trace; otherwise long enough to hold the gaps its summary needs at
    the fastest rate the toolkit runs (a slower link may still give too few: the summary says so)."""
    least = MIN_BUSY_GAPS * FRAME_BYTES * 8 / (MAX_RATE_MBPS * 1e6)
    if seconds != 0 and not (math.isfinite(seconds) and least <= seconds <= MAX_FIDELITY_S):
        raise UsageError(f"--fidelity-s {seconds:g}: must be 0 (skip) or from {least:.2g} to {MAX_FIDELITY_S:g} s")


def describe_fidelity(fid: dict, shaper: str) -> str:
    """One progress line on how faithfully the bottleneck paced during the trace."""
    if not fid.get("available"):
        return f"pacing fidelity ({shaper}): not measured: {fid.get('reason')}"
    text = f"pacing fidelity ({shaper}): {fid['frac_gt10']:.1%} of busy gaps >10 % off, {fid['frac_gt25']:.1%} >25 %"
    if fid.get("lag_p99_frames") is not None:
        text += f"; lag behind the ideal service curve p50/p99/max {fid['lag_p50_frames']:.2f}/"
        text += f"{fid['lag_p99_frames']:.2f}/{fid['lag_max_frames']:.2f} frames"
    return text


class Experiment:
    def __init__(
        self,
        cfg: DumbbellConfig,
        backend: str,
        kind: str,
        out: Path | None = None,
        say: Say | None = None,
        require_recorder: bool = False,
        saves_result: bool = False,
    ) -> None:
        # The shaper resolved for the backend, so results name the one that ran, not auto.
        self.cfg, self.backend, self.kind, self.out = cfg.for_backend(backend), backend, kind, out
        # How the shaper was chosen, kept in the result; a warning is said before the run starts.
        used, why = shaper_choice(cfg.shaper, backend)
        self.shaper_choice = {"requested": cfg.shaper, "used": used, "why": why,
                              "warning": line_capacity_warning(used, cfg.hosts, rate_mbps=cfg.rate_mbps)}  # fmt: skip
        self.say: Say = say or stderr_say
        self.label = kind
        self.require_recorder = require_recorder
        self.net: Dumbbell | None = None
        self.flows: LongFlows | None = None
        self.started: FlowStart | None = None
        self.recorder: Recorder | None = None
        self.recording: Recording | None = None
        self.drop_monitor: DropMonitor | None = None
        self.drops: DropSummary | None = None
        self.fidelity: dict = {"available": False, "reason": "not traced"}
        self.departures: list[float] = []
        self.congestion_controls: dict[str, int] = {}
        # The senders' summed windows traced between two monotonic times (with the recorder).
        self.cwnd_sums: Callable[[float, float], list[float]] | None = None
        self.partial: Callable[[], dict] = dict  # the experiment's own data so far, saved if it fails
        self.write_partial: Callable[[Path], None] | None = None  # its own files so far (samples.csv)
        self.leftovers: list[str] = []  # what dead runs left on the machine when this one began
        self.checks: list[Callable[[], None]] = []  # the experiment's own health checks (its processes)
        self.t_wall = time.monotonic()
        self.other_runs_live: list[str] = []  # run ids of other toolkit runs seen live during this one
        # True where finish() follows the with block: a signal during the teardown then waits for the
        # saved result; otherwise it acts as soon as the teardown is done.
        self.saves_result = saves_result
        self.deferred: SignalsDeferred | None = None  # signals held from the teardown to the saved result

    # ---- life cycle --------------------------------------------------------------------------

    def __enter__(self) -> Experiment:
        self.t_wall = time.monotonic()
        if self.shaper_choice["warning"]:
            self.say(f"  warning: {self.shaper_choice['warning']}")
        self.check_leftovers()
        self.net = Dumbbell(self.cfg, self.backend).__enter__()
        poll = self.net.halt_poll
        if poll and poll["before_run_ns"] != poll["during_run_ns"]:
            self.say(
                f"  idle vCPUs poll up to {poll['during_run_ns'] / 1000:g} us before they halt while this runs "
                f"(haltpoll's guest_halt_poll_ns, {poll['before_run_ns'] / 1000:g} us before; restored after)"
            )
        self.note_other_runs()
        try:
            self.drop_monitor = DropMonitor(self.net).start()
        except BaseException:
            self.net.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        net = self.net
        assert net is not None
        # From here until the result is saved (finish(), or error.json below), Ctrl-C and SIGTERM
        # are noted and delivered after it: the work is done, and its result must not be lost to a
        # signal that arrives during the teardown.
        self.deferred = SignalsDeferred()
        self.note_other_runs()
        # Nested so that an exception in one step still lets the later ones run: the teardown
        # always, the error record if failing.
        try:
            try:
                if self.flows is not None and exc is None:
                    self.congestion_controls = self.flows.congestion_controls()
            finally:
                try:
                    if self.recorder is not None:
                        self.recording = self.recorder.stop()
                finally:
                    try:
                        if self.flows is not None:
                            self.flows.stop()
                    finally:
                        if self.drop_monitor is not None and exc is None:
                            self.drops = self.drop_monitor.stop()
        finally:
            try:
                net.stop()
            finally:
                if exc is not None:
                    try:
                        if self.out is not None:
                            self.save_failure(exc)
                    finally:
                        # Already failing: the exception in flight says more than a late signal.
                        self.deferred.restore()
                elif not self.saves_result:
                    self.deferred.release()  # no result to wait for: the signal acts now

    def note_other_runs(self) -> None:
        """Other toolkit runs live now (checked when the network is up and when the work ends): they
        share the CPUs and the global sysctls, so a result measured beside one says so."""
        assert self.net is not None
        try:
            others = {s.run_id for s in live_runs(exclude=self.net.state.run_id)}
        except OSError:  # the state directory went away: nothing to say either way
            return
        self.other_runs_live = sorted(set(self.other_runs_live) | others)

    def start_flows(self, n: int, tool: str = "iperf") -> LongFlows:
        """Start N long-lived flows (all established before any data), then the recorder on them."""
        assert self.net is not None
        self.flows = LongFlows(self.net, n, tool)
        self.started = self.flows.start()
        self.say(f"  {self.started.established} flows established in {self.started.seconds_to_all_established} s")
        ports = range(min(self.flows.ports), max(self.flows.ports) + 1) if self.flows.ports else None
        self.start_recorder(ports)
        return self.flows

    def start_recorder(self, ports: range | None) -> None:
        """The recorder on the bottleneck; cwnd of the flows on `ports` (None: no flows to trace)."""
        assert self.net is not None
        try:
            self.recorder = Recorder(self.net.bottleneck, ports, self.net.state).start()
            duty = self.recorder.rec.cwnd_duty
            if ports is not None and duty < 1:
                self.say(
                    f"  cwnd: traced {duty:.0%} of each 100 ms at {self.net.bottleneck.rate_mbps:g} Mb/s, so that "
                    "reading the trace leaves the traffic its CPU (monitors/cwnd.py trace_duty)"
                )
        except (OSError, LookupError) as e:
            if self.require_recorder:
                raise RunError(f"the queue monitor could not start: {e}") from e
            self.say(f"  queue monitor not started: {e}")

    def check_leftovers(self) -> None:
        """Name what dead runs left (a spinning delay line, iperf, raised sysctls skew a measurement)
        in one warning line; the result carries them. Removing them is `bufsize clean`'s job."""
        try:
            self.leftovers = find_leftovers()
        except Exception as e:  # noqa: BLE001 - a check, never a reason not to run
            self.leftovers = [f"could not check: {type(e).__name__}: {e}"]
        if self.leftovers:
            more = len(self.leftovers) - 4
            shown = ", ".join(self.leftovers[:4]) + (f" and {more} more" if more > 0 else "")
            msg = f"bufsize {self.kind}: warning: leftovers of dead runs: {shown} (`bufsize clean` removes them)"
            print(msg, file=sys.stderr, flush=True)

    def check_health(self) -> None:
        """RunError at once if the delay line died or stalled, or a traffic process exited."""
        if self.net is not None:
            self.net.check_alive()
        if self.flows is not None:
            self.flows.check_processes()
        for check in self.checks:
            check()

    def sleep(self, seconds: float) -> None:
        """Sleep, checking the run's health several times a second (a fault ends it promptly)."""
        sleep_checked(seconds, self.check_health)

    def warm_up(self, seconds_at: Callable[[int], float], where: str = "") -> None:
        """Wait while the flows warm up at the current buffer (seconds_at: the warm-up at a buffer of so
        many bytes)."""
        assert self.net is not None
        seconds = seconds_at(self.net.buffer_bytes)
        self.say(f"  warming up {seconds:.0f} s{' ' + where if where else ''}")
        self.sleep(seconds)

    def open_link(self, flows: int, tool: str = "iperf", note: Callable[[Any], str] = lambda _: "",
                  warm_s: Callable[[int], float] | None = None) -> EmulatedLink:  # fmt: skip
        """Start `flows` long flows and the recorder; the link an experiment samples (scaffold/link.py).
        `note`: a probe's progress text from the experiment's own checks; `warm_s` serves the twin's
        fresh starts only."""
        assert self.net is not None
        started = self.start_flows(flows, tool)
        rec = self.recorder.rec if self.recorder else None
        if rec is not None:
            self.cwnd_sums = lambda t0, t1: [s for t, _, s, _ in rec.cwnd_sum if t0 <= t <= t1]
        trace = (lambda: rec.queue) if rec is not None else None
        return EmulatedLink(self.net, started, self.sleep, trace, note=note, t_wall=self.t_wall)

    def describe(self) -> str:
        """What the run's first line adds about the link: the TCP settings changed from Linux's."""
        return "".join(f"; {c}" for c in self.cfg.tcp_changes())

    def clock_note(self, result: dict) -> str:
        return f"{result['wall_seconds']:.0f} s"

    def trace_fidelity(self, seconds: float) -> dict:
        """Departures from the bottleneck for `seconds` (0: skip), summarized as in the 2012 figure."""
        assert self.net is not None
        if seconds <= 0:
            self.fidelity = {"available": False, "reason": "skipped (--fidelity-s 0)"}
            return self.fidelity
        dl = self.net.delayline
        stats0 = dl.stats() if dl else {}
        with FidelityMonitor(self.net.bottleneck.dev, self.cfg.rate_mbps, self.net.state, seconds) as mon:
            self.sleep(seconds)
            self.fidelity, self.departures = mon.stop()
        stats1 = dl.stats() if dl else {}
        lost = line_lost(stats0, stats1)
        if lost is not None:
            self.fidelity["line"] = lost
        before, after = stats0.get("pacer", {}), stats1.get("pacer", {})
        if before and after:
            # How many departures the pacer's kicks released (its counters, written every 200 ms).
            self.fidelity["pacer"] = {k: after[k] - before[k] for k in ("kicks", "hits", "send_errors")}
            self.fidelity["pacer"]["on"] = after["on"]
        self.say("  " + describe_fidelity(self.fidelity, self.cfg.shaper))
        return self.fidelity

    # ---- the result --------------------------------------------------------------------------

    def monitors_summary(self) -> dict:
        return summary(self.recording) if self.recording else {"error": "queue monitor could not start"}

    def flags(self, reference_mbps: float | None, monitors: dict) -> dict[str, bool | None]:
        """The validity checks every experiment makes, each from what was measured (`monitors`:
        monitors_summary()); None where a check could not be made. The CPU's idle share, a proxy,
        is a caution (scaffold/cautions.py), not a flag."""
        assert self.drops is not None
        queue_hz = monitors.get("queue", {}).get("rate_hz")
        fid = self.fidelity
        return {
            "reference_near_nominal": (
                reference_mbps >= GOOD_REFERENCE * self.cfg.rate_mbps if reference_mbps is not None else None
            ),
            "flows_held_until_all_up": self.started.held_until_all_up if self.started else None,
            "congestion_control_as_asked": (set(self.congestion_controls) == {self.cfg.cc} if self.started else None),
            "no_drops_outside_bottleneck": self.drops.outside_total == 0,
            "pacing_fidelity_ok": fid["frac_gt10"] <= MAX_FIDELITY_GT10 if fid.get("available") else None,
            "queue_monitor_kept_up": not monitors.get("error") and queue_hz is not None and queue_hz >= MIN_QUEUE_HZ,
            "no_leftovers_of_dead_runs": not self.leftovers,
            "no_other_run_live": not self.other_runs_live,
        }

    def finish(
        self,
        fields: dict,
        own_flags: dict[str, bool | None],
        reference_mbps: float | None,
        cpu_idle_min: float | None,
        options: dict,
        write_extra: Callable[[Path], None] | None = None,
    ) -> dict:
        """The result: the experiment's fields and flags, then what every result carries; written to --out.

        A signal that came during the teardown or while this ran is delivered once the result is saved."""
        with self._signals_after():
            assert self.drops is not None
            monitors = self.monitors_summary()  # once: the flags, the cautions and the result read it
            flags = own_flags | self.flags(reference_mbps, monitors)
            result = {
                "kind": self.kind,
                "flows": self.started.flows if self.started else 0,
                "hosts": self.cfg.hosts,
                "cc": self.cfg.cc,
                "nominal_rate_mbps": self.cfg.rate_mbps,
                "reference_rate_mbps": round(reference_mbps, 3) if reference_mbps is not None else None,
                **fields,
                "valid": all(v is not False for v in flags.values()),
                "flags": flags,
                "cautions": cautions(monitors, cpu_idle_min),
                "wall_seconds": round(time.monotonic() - self.t_wall, 1),
                "delay_backend": self.backend,
                "shaper_choice": self.shaper_choice,
                "flows_start": (
                    asdict(self.started) | {"congestion_controls_seen": self.congestion_controls}
                    if self.started
                    else None
                ),
                "fidelity": self.fidelity,
                "drops": self.drops.to_dict(),
                "monitors": monitors,
                "leftovers_of_dead_runs": self.leftovers,
                "other_runs_live": self.other_runs_live,
                # A signal that arrived after the measurement: the result is whole, the run then stopped.
                "signal_after_measurement": (
                    signal.Signals(self.deferred.got[0]).name if self.deferred and self.deferred.got else None
                ),
                "options": options,
                "config": self.cfg.to_dict(),
                "manifest": machine_manifest(
                    self.backend,
                    self.cfg.cc,
                    self.cfg.shaper,
                    pacing_applies(self.cfg, self.backend),
                    self.net.halt_poll if self.net else None,
                ),
            }
            result = stamp(result, "result")  # the same document whether written, printed or returned
            if self.out is not None:
                self.write(result, write_extra)
            return result

    @contextmanager
    def _signals_after(self) -> Iterator[None]:
        try:
            yield
        finally:
            if self.deferred is not None:
                self.deferred.release()

    def write(self, result: dict, write_extra: Callable[[Path], None] | None = None) -> None:
        """result.json first, then the monitors' data and plots: a write that fails after the measurement
        (a full disk, a directory planted where a CSV goes) costs that file, never the result. What could
        not be written is said in one line and listed in the result (`files_not_written`); the result is
        returned (and printed by the command) even when result.json itself could not be written."""
        out = self.out
        assert out is not None
        try:
            make_dirs(out)
            write_json_atomic(out / "result.json", result)
        except OSError as e:
            result["files_not_written"] = [f"result.json: {e.strerror or e}"]
            self.say(f"  result.json could not be written ({e.strerror or e}): the result is only what is printed")
            return
        (out / "error.json").unlink(missing_ok=True)
        try:
            self.write_data(write_extra)
        except OSError as e:
            result["files_not_written"] = [f"the monitors' data: {e.strerror or e} ({e.filename or out})"]
            self.say(f"  result.json written; the monitors' data not: {e.strerror or e} ({e.filename or out})")
            with suppress(OSError):
                write_json_atomic(out / "result.json", result)
            return
        try:
            plot_run(out, fidelity_2012=FIDELITY_2012)
        except Exception as e:  # plots are a convenience; the data and result are already written
            self.say(f"  plots not drawn: {type(e).__name__}: {e}")

    def write_data(self, write_extra: Callable[[Path], None] | None = None) -> None:
        out = self.out
        assert out is not None
        make_dirs(out)
        if write_extra is not None:
            write_extra(out)
        if self.recording is not None:
            write_csvs(self.recording, out)
        if self.departures:
            write_fidelity_csv(self.departures, self.cfg.rate_mbps, out / "fidelity.csv")

    def save_failure(self, exc: BaseException) -> None:
        """The data so far and error.json; never raises over the exception that brought us here."""
        assert self.out is not None
        try:
            self.write_data(self.write_partial)
            partial = self.partial()
        except Exception as e:  # noqa: BLE001 - best effort while another exception is in flight
            partial = {"note": f"partial data could not be collected: {type(e).__name__}: {e}"}
        error = {
            "kind": self.kind,
            "error": str(exc) or type(exc).__name__,
            "type": type(exc).__name__,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "wall_seconds": round(time.monotonic() - self.t_wall, 1),
            "traceback": traceback.format_exception(exc)[-3:],
            "config": self.cfg.to_dict(),
            "leftovers_of_dead_runs": self.leftovers,
            "partial": partial,
        }
        try:
            write_json_atomic(self.out / "error.json", error)
        except OSError as e:
            self.say(f"  could not write {self.out}/error.json: {e}")
