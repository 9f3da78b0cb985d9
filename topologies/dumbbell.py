"""The dumbbell, live: built from its description (bufsize.topologies.description), owned until torn down.

Every node is a network namespace named bsz-<run>-<node>; every interface lives inside one, so
deleting the namespaces removes all interfaces and qdiscs. Namespaces and processes are written
to the run's ledger before they are created (bufsize.topologies.ledger), and teardown removes exactly
what the ledger holds (bufsize.topologies.cleanup).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path

from bufsize.topologies import netns, sysctl
from bufsize.topologies.bottleneck import Bottleneck
from bufsize.topologies.cleanup import signals_held, teardown
from bufsize.topologies.config import DumbbellConfig
from bufsize.topologies.delay import DelayLine
from bufsize.topologies.description import (
    OFFLOADS_OFF,
    DumbbellPlan,
    Host,
    Job,
    tcp_sysctls,
)
from bufsize.topologies.errors import MachineError, RunError
from bufsize.topologies.ledger import RunState, live_runs, state_lock
from bufsize.topologies.line import NICE as LINE_NICE
from bufsize.topologies.line import RTPRIO as LINE_RTPRIO
from bufsize.topologies.line import SPIN_US as LINE_SPIN_US
from bufsize.topologies.line import LineBottleneck, isolation
from bufsize.topologies.proc import is_running, popen_dying_with_parent, run

# On a KVM guest whose cpuidle driver is haltpoll, an idle vCPU polls up to this long before it
# halts, while a run lasts. At 0 (the development VM's boot setting) it halts at once, and each
# wake-up then waits for the hypervisor to run it again, counted as steal: the state in which
# answers moved. Polling up to 200 us (the kernel's own default) kept the link about 7 points busier
# than halting at once, with a sixth of the steal (docs/lab/constants.md#halt_poll_ns). Raised for
# the run and restored after, like the backlog; polling spends the host's CPU only while a vCPU
# waits for work, 200 us at most.
HALT_POLL_NS = 200_000

__all__ = ["OFFLOADS_OFF", "Dumbbell", "Host", "tcp_sysctls"]

PARALLEL = 8


def bridge_netfilter_loaded() -> bool:
    return Path("/proc/sys/net/bridge").is_dir()


def run_parallel(jobs: Sequence[Job]) -> None:
    with ThreadPoolExecutor(PARALLEL) as pool:
        for fut in [pool.submit(run, argv, input=inp or None, timeout=120) for argv, inp in jobs]:
            fut.result()


def other_lines_cpus(own_run: str) -> dict[int, str]:
    """CPUs that the line shapers of other live runs are pinned to: {cpu: "run ID, PID n"}."""
    taken: dict[int, str] = {}
    for st in live_runs(exclude=own_run):
        if not is_running(st.owner_pid, st.owner_start):  # killed, not yet reaped: its line dies with it
            continue
        for p in st.processes:
            if p.get("what") != "delay line" or not is_running(p["pid"], p.get("start")):
                continue
            try:
                cpus = os.sched_getaffinity(p["pid"])
            except OSError:  # ended meanwhile
                continue
            if len(cpus) == 1:
                taken[next(iter(cpus))] = f"run {st.run_id}, PID {p['pid']}"
    return taken


class Dumbbell:
    """Builds, reconfigures and removes one dumbbell. Use as a context manager."""

    def __init__(self, cfg: DumbbellConfig, backend: str, state: RunState | None = None) -> None:
        cfg.validate()
        self.cfg = cfg.for_backend(backend)  # the shaper resolved: what runs is what is reported
        self.backend = backend
        self.state = state or RunState.create()
        self.plan = DumbbellPlan(cfg, backend, self.state.run_id)
        self.switch_ns = self.plan.switch_ns
        self.receiver_ns = self.plan.receiver_ns
        self.delay_ns = self.plan.delay_ns
        self.receiver_ip = self.plan.receiver_ip
        self.receiver_dev = self.plan.receiver_dev
        self.hosts: list[Host] = self.plan.hosts
        self.bottleneck: Bottleneck = self.plan.bottleneck
        self.delayline: DelayLine | None = None
        # The idle vCPUs' poll before and during the run, where the guest has it (build())
        self.halt_poll: dict | None = None
        self._saved_affinity: dict[int, set[int]] = {}  # thread id: its CPUs before _keep_off_cpu

    @property
    def buffer_bytes(self) -> int:
        return self.bottleneck.buffer_bytes

    @property
    def namespaces(self) -> list[str]:
        return self.plan.namespaces

    @property
    def pacing(self) -> bool:
        """Whether the delay line paces the bottleneck (config, shaper and backend allow it)."""
        return self.plan.pacing

    # ---- life cycle -------------------------------------------------------------------------

    def __enter__(self) -> Dumbbell:
        try:
            self.build()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def build(self) -> None:
        plan = self.plan
        with state_lock():  # recorded and made in one step: `bufsize clean` decides under this lock
            self.state.add_namespaces(plan.namespaces)
            netns.add_many(plan.namespaces)
        # Bursts leave veths through the per-CPU backlog (netdev_max_backlog, global, default 1000);
        # a drop there would be a loss outside the bottleneck.
        sysctl.raise_global(self.state, "net.core.netdev_max_backlog", 100_000)
        if sysctl.exists(sysctl.HALT_POLL):
            before, during = sysctl.raise_global(self.state, sysctl.HALT_POLL, HALT_POLL_NS)
            self.halt_poll = {"before_run_ns": before, "during_run_ns": during}
        # Outside the initial namespace a host may only default to an "allowed" congestion control.
        sysctl.allow_congestion_control(self.state, self.cfg.cc)
        run(["ip", "-batch", "-"], input=plan.links(), timeout=300)
        sysctls = plan.sysctls(bridge_netfilter_loaded())
        run_parallel([(netns.in_ns(ns, ["sysctl", "-q", "-w", *vals]), "") for ns, vals in sysctls])
        run_parallel([(netns.in_ns(ns, ["ethtool", "-K", dev, *OFFLOADS_OFF]), "") for ns, dev in plan.interfaces()])
        run_parallel(plan.addresses())
        argv, fdb = plan.forwarding_entries()
        run(argv, input=fdb, timeout=120)
        self._configure_qdiscs()
        self._wait_bridge_forwarding()
        if plan.delay_ns:
            kick = self.bottleneck.kick_socket() if plan.pacing else None
            line_args: list[str] = []
            extra: dict = {}
            # Choosing the line's CPU and starting it is one step under the state lock: two runs
            # starting together would otherwise both take the same free CPU.
            is_line = isinstance(self.bottleneck, LineBottleneck)
            try:
                with state_lock() if is_line else nullcontext():
                    if isinstance(self.bottleneck, LineBottleneck):
                        self.bottleneck.status_path = self.state.workdir / "line-status"
                        line_args = self.bottleneck.delayline_args()
                        extra = self._isolate_line()
                    self.delayline = DelayLine(
                        self.state,
                        plan.delay_ns,
                        *plan.delay_devs,
                        plan.delay_map(),
                        kick=kick,
                        rate_mbps=self.cfg.rate_mbps,
                        line_args=line_args,
                        **extra,
                    )
                    self.delayline.start()
            finally:
                if kick is not None:
                    kick.close()  # the delay line holds its own copy

    def _isolate_line(self) -> dict:
        """The line shaper's departures are its own send() calls: keep the work its sends cause (the
        receiver's TCP, the switch and the senders' TCP for acks) off its CPU with RPS on the two
        ports it sends into, and pin it to that CPU (topologies/line.py has the measurements)."""
        how = {"spin_us": LINE_SPIN_US, "rtprio": LINE_RTPRIO, "nice": LINE_NICE}
        taken = other_lines_cpus(self.state.run_id)
        # CPUs held by other lines count as this process's (an earlier dumbbell of this process may
        # have moved it off one), and none of them takes this run's line or its steered work.
        cpus = os.sched_getaffinity(0) | set(taken)
        iso = isolation(cpus)
        if iso is None:
            return how
        cpu, _ = iso
        free = cpus - set(taken)
        if cpu in taken:
            if len(free) < 2:  # the line's own CPU, and one at least for everything else
                raise MachineError(
                    f"the line shaper needs a CPU of its own, and CPU {cpu} is held by the line of "
                    f"another bufsize run ({taken[cpu]}): wait for it to end, or use --shaper htb"
                )
            cpu = max(free)
        mask = sum(1 << c for c in free if c != cpu)
        self._keep_off_cpu(cpu)
        for ns, dev in ((self.switch_ns, self.plan.bottleneck_dev), (self.receiver_ns, self.receiver_dev)):
            # sysfs shows a namespace's devices only when mounted inside it, which `ip netns exec` does.
            path = f"/sys/class/net/{dev}/queues/rx-0/rps_cpus"
            run(["ip", "netns", "exec", ns, "tee", path], input=f"{mask:x}\n")
        return how | {"cpu": cpu}

    def _keep_off_cpu(self, cpu: int) -> None:
        """Move this process's threads, and so every program it starts from now on (the senders'
        iperf, the monitors), off the line's CPU: at 400 sender hosts their work on that CPU delayed
        the line's departures (bench/results/shaper-scale.md). Undone by stop()."""
        others = os.sched_getaffinity(0) - {cpu}
        for tid in map(int, os.listdir("/proc/self/task")):
            try:
                self._saved_affinity.setdefault(tid, os.sched_getaffinity(tid))
                os.sched_setaffinity(tid, others)
            except OSError:  # a thread that ended meanwhile
                pass

    def _restore_affinity(self) -> None:
        for tid, cpus in self._saved_affinity.items():
            try:
                os.sched_setaffinity(tid, cpus)
            except OSError:
                pass
        self._saved_affinity.clear()

    def _configure_qdiscs(self) -> None:
        run_parallel(self.plan.qdiscs())

    def stop(self) -> list[str]:
        """Remove everything this dumbbell created (idempotent)."""
        # Held from here: a second Ctrl-C while the delay line stops must not skip the teardown.
        with signals_held():
            try:
                if self.delayline is not None:
                    self.delayline.stop()
            finally:
                try:
                    removed = teardown(self.state)
                finally:
                    self._restore_affinity()
        return removed

    def _wait_bridge_forwarding(self, timeout: float = 15.0) -> None:
        """Bridge ports pass through a non-forwarding state after they come up; frames sent then are lost."""
        deadline = time.monotonic() + timeout
        while True:
            out = run(["bridge", "-n", self.switch_ns, "-j", "link", "show"]).stdout
            ports = json.loads(out or "[]")
            waiting = [p["ifname"] for p in ports if p.get("state") != "forwarding"]
            if len(ports) == self.cfg.hosts and not waiting:
                return
            if time.monotonic() > deadline:
                raise RunError(f"bridge ports not forwarding after {timeout:.0f} s: {', '.join(waiting[:5])}")
            time.sleep(0.05)

    # ---- while running ----------------------------------------------------------------------

    def set_buffer(self, buffer_bytes: int) -> None:
        """Change the bottleneck buffer in place; nothing else in the tree is touched."""
        try:
            self.bottleneck.set_buffer(buffer_bytes)
        except RunError:
            self.check_alive()  # the line shaper's limit waits on the delay line: a dead or stopped one says so
            raise

    def set_initcwnd(self, packets: int) -> None:
        """Every sender's initial congestion window toward the receiver (a host route with initcwnd):
        Appenzeller 2004's short-flow model assumes 2 packets, Linux starts at 10."""
        if not 1 <= packets <= 1000:
            raise RunError(f"initial window {packets}: must be from 1 to 1000 packets")
        run_parallel(
            [
                (
                    [
                        "ip",
                        "-n",
                        h.ns,
                        "route",
                        "replace",
                        f"{self.receiver_ip}/32",
                        "dev",
                        h.dev,
                        "initcwnd",
                        str(packets),
                    ],
                    "",
                )
                for h in self.hosts
            ]
        )

    def spawn(self, ns: str, argv: Sequence[str], what: str, **popen_kw) -> subprocess.Popen:
        """Start a program inside one of this dumbbell's namespaces, recorded for teardown; it is
        killed if this process dies (call from the main thread: see proc.die_with_parent)."""
        popen_kw.setdefault("start_new_session", True)
        proc = popen_dying_with_parent(netns.in_ns(ns, argv), **popen_kw)
        self.state.add_process(proc.pid, what)
        return proc

    def check_alive(self) -> None:
        """Raise if the delay line has died or stalled (traffic would silently stop)."""
        if self.delayline is not None:
            self.delayline.check()
