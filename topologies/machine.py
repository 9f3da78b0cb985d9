"""What this machine can do, probed rather than assumed (`bufsize doctor`)."""

from __future__ import annotations

import gzip
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path

from bufsize.topologies import netns, sysctl
from bufsize.topologies.cleanup import teardown
from bufsize.topologies.delay import HELPER, helper_ready
from bufsize.topologies.errors import MachineError
from bufsize.topologies.ledger import RunState, fs_type, scratch_root
from bufsize.topologies.nssim import twin_status
from bufsize.topologies.proc import run
from bufsize.topologies.tracefs import tracefs_root, tracepoints

__all__ = ["tracefs_root", "tracepoints"]  # re-exported: the machine's facts in one place
# Each qdisc with the fewest arguments it accepts.
QDISCS = {"htb": [], "tbf": ["rate", "1mbit", "burst", "3028", "limit", "10000"], "bfifo": [], "netem": []}
REQUIRED_TOOLS = ("ip", "tc", "bridge", "ethtool", "nsenter", "ping")


def available_congestion_controls() -> list[str]:
    try:
        text = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text()
    except OSError:
        return []
    return text.split()


def cpu_model() -> str | None:
    """The CPUs' model name (/proc/cpuinfo). The development VM came up on three kernel builds in one
    week (fc-v669, v657, v595) while answers moved by day; this and the two below let results be
    grouped by the machine they ran on, not only by kernel."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                return value.strip()
    except OSError:
        pass
    return None


def clocksource() -> str | None:
    """The kernel's clock (tsc, kvm-clock, ...): every timer of the emulation reads it."""
    try:
        return Path("/sys/devices/system/clocksource/clocksource0/current_clocksource").read_text().strip()
    except OSError:
        return None


def cpuidle_driver() -> str | None:
    """How idle CPUs wait (haltpoll, acpi_idle, intel_idle, none): on a KVM guest with haltpoll a
    halted vCPU waits for the hypervisor at each wake-up unless it polls first (dumbbell.HALT_POLL_NS)."""
    try:
        return Path("/sys/devices/system/cpu/cpuidle/current_driver").read_text().strip()
    except OSError:
        return None


def halt_poll_ns() -> int | None:
    """How long an idle vCPU polls before it halts (haltpoll's guest_halt_poll_ns), None without haltpoll."""
    return int(sysctl.read(sysctl.HALT_POLL)) if sysctl.exists(sysctl.HALT_POLL) else None


def kernel_hz() -> int | None:
    """CONFIG_HZ where the kernel exposes its config (/proc/config.gz): the jiffy TCP's coarser timers count in."""
    try:
        with gzip.open("/proc/config.gz", "rt") as f:
            for line in f:
                if line.startswith("CONFIG_HZ="):
                    return int(line.split("=", 1)[1])
    except (OSError, ValueError, EOFError):
        pass
    return None


@cache
def qdisc_support() -> dict[str, bool]:
    """Try each qdisc on the loopback of a throwaway namespace, recorded in its own ledger first."""
    state = RunState.create()
    probe = f"{state.ns_prefix}probe"
    state.add_namespaces([probe])
    try:
        netns.add_many([probe])
        found = {}
        for kind, args in QDISCS.items():
            res = run(
                ["tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", "handle", "1:", kind, *args],
                check=False,
            )
            found[kind] = res.returncode == 0
            run(["tc", "-n", probe, "qdisc", "del", "dev", "lo", "root"], check=False)
        return found
    finally:
        teardown(state)


def kernel_has_module(name: str) -> bool:
    """Loaded, built in, or loadable: /sys/module, then modules.dep of the running kernel."""
    if Path(f"/sys/module/{name}").exists():
        return True
    dep = Path(f"/lib/modules/{os.uname().release}/modules.dep")
    try:
        return re.search(rf"/{name}\.ko", dep.read_text()) is not None
    except OSError:
        return False


def tool_version(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    res = run(argv, check=False, timeout=10)
    text = (res.stdout + res.stderr).strip().splitlines()
    return text[0] if text else None


def iperf2_version() -> tuple[int, ...] | None:
    line = tool_version(["iperf", "-v"])
    m = re.search(r"iperf version (\d+)\.(\d+)\.(\d+)", line or "")
    return tuple(int(x) for x in m.groups()) if m else None


@dataclass
class Capabilities:
    root: bool
    kernel: str
    qdiscs: dict[str, bool]
    openvswitch_module: bool
    tracepoints: dict[str, bool]
    congestion_controls: list[str]
    default_congestion_control: str
    iperf: str | None
    iperf3: str | None
    tools_missing: list[str]
    delayline_built: bool
    delay_backend: str | None
    scratch_dir: str = ""  # where runs keep the delay line's stats and status page
    scratch_fs: str | None = None
    simulator_twin: str = ""  # whether `bufsize sim` can run here (topologies/nssim.py)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def resolve_backend(requested: str, qdiscs: dict[str, bool], delayline_built: bool, shaper: str = "auto") -> str:
    """auto: the delay line for the line shaper (auto or line: it lives in the delay line, which then
    carries the delay too, on every kernel: topologies/config.py says why); for htb and tbf, netem
    where the kernel has it (no userspace hop), else the delay line."""
    if requested == "netem" and not qdiscs.get("netem"):
        raise MachineError("--delay-backend netem: this kernel has no sch_netem (use delayline or auto)")
    if requested == "delayline" and not delayline_built:
        raise MachineError(f"--delay-backend delayline: {HELPER} is not built (run ./setup.sh)")
    if requested != "auto":
        return requested
    if shaper in ("auto", "line"):
        if delayline_built:
            return "delayline"
        raise MachineError(
            f"the default shaper, the line, runs in the delay line and {HELPER} is not built: run ./setup.sh "
            "(or give --shaper htb or tbf for a kernel shaper)"
        )
    if qdiscs.get("netem"):
        return "netem"
    if delayline_built:
        return "delayline"
    raise MachineError("no delay backend: the kernel has no netem and the delay line is not built (run ./setup.sh)")


def delay_backend(requested: str, shaper: str = "auto") -> str:
    """The backend a run will use on this machine for `--delay-backend requested` and `--shaper shaper`."""
    return resolve_backend(requested, qdisc_support(), helper_ready(), shaper)


def probe() -> Capabilities:
    root = os.geteuid() == 0
    missing = [t for t in REQUIRED_TOOLS if shutil.which(t) is None]
    qd = qdisc_support() if root and not missing else {k: False for k in QDISCS}
    try:
        cc_default = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    except OSError:
        cc_default = "unknown"
    ccs = available_congestion_controls()
    caps = Capabilities(
        root=root,
        kernel=os.uname().release,
        qdiscs=qd,
        openvswitch_module=kernel_has_module("openvswitch"),
        tracepoints=tracepoints() if root else {},
        congestion_controls=ccs + (["bic (module)"] if "bic" not in ccs and kernel_has_module("tcp_bic") else []),
        default_congestion_control=cc_default,
        iperf=tool_version(["iperf", "-v"]),
        iperf3=tool_version(["iperf3", "-v"]),
        tools_missing=missing,
        delayline_built=helper_ready() if root else HELPER.exists(),
        delay_backend=None,
        scratch_dir=str(scratch_root()),
        scratch_fs=fs_type(scratch_root()),
        simulator_twin=twin_status(),
    )
    if not root:
        caps.problems.append("not running as root: namespaces and qdiscs need root")
    if missing:
        caps.problems.append(f"missing tools: {', '.join(missing)} (run ./setup.sh)")
    for kind in ("htb", "tbf", "bfifo"):
        if root and not missing and not qd[kind]:
            caps.problems.append(f"the kernel has no {kind} qdisc")
    v = iperf2_version()
    if v is None:
        caps.problems.append("iperf 2 is not installed (run ./setup.sh)")
    elif v < (2, 1, 0):
        caps.problems.append(f"iperf {'.'.join(map(str, v))} is older than 2.1 (no --txdelay-time)")
    try:
        caps.delay_backend = resolve_backend("auto", qd, caps.delayline_built)
    except MachineError as e:
        caps.problems.append(str(e))
    if not qd.get("netem"):
        caps.notes.append("no sch_netem in this kernel: propagation delay comes from the userspace delay line")
    if caps.scratch_fs != "tmpfs":
        caps.notes.append(
            f"scratch files go to {caps.scratch_dir} ({caps.scratch_fs or 'unknown file system'}, not tmpfs): "
            "the delay line may stall behind the disk; a tmpfs at /run or /dev/shm avoids it"
        )
    if "reno" not in ccs:
        caps.notes.append("reno is not available: theory checks (which assume Reno) cannot run as specified")
    if cc_default != "reno":
        caps.notes.append(f"kernel default congestion control is {cc_default}; every run sets its own (default reno)")
    return caps


def format_report(c: Capabilities, extra: list[str] | None = None) -> str:
    """The report `bufsize doctor` prints; `extra` lines (what the caller measured) go before the verdict."""
    yes = {True: "yes", False: "no"}
    lines = [
        f"root:                 {yes[c.root]}",
        f"kernel:               {c.kernel}",
        "qdiscs:               " + ", ".join(f"{k} {yes[v]}" for k, v in c.qdiscs.items()),
        f"openvswitch module:   {yes[c.openvswitch_module]}",
        "tracepoints:          " + (", ".join(f"{k} {yes[v]}" for k, v in c.tracepoints.items()) or "not checked"),
        f"congestion controls:  {' '.join(c.congestion_controls)} (kernel default {c.default_congestion_control})",
        f"iperf:                {c.iperf or 'missing'}",
        f"iperf3:               {c.iperf3 or 'missing'}",
        f"delay line helper:    {'built' if c.delayline_built else 'not built'}",
        f"delay backend (auto): {c.delay_backend or 'none'} (with the default shaper, the line)",
        f"scratch files:        {c.scratch_dir} ({c.scratch_fs or 'unknown'})",
        f"simulator twin:       {c.simulator_twin or 'unknown'} (bufsize sim)",
    ]
    lines += [f"note: {n}" for n in c.notes]
    lines += extra or []
    lines += [f"PROBLEM: {p}" for p in c.problems]
    lines.append("ok" if not c.problems else "not ok: fix the problems above")
    return "\n".join(lines)


def require_root() -> None:
    if os.geteuid() != 0:
        raise MachineError("bufsize needs root (network namespaces, qdiscs): run it with sudo")
