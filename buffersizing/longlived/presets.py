"""Named sweeps: the main job's quick replication, the full one, the Reno theory check, Appenzeller 2004's
Fig 11 (many Reno flows with spread RTTs on an OC3 link), and the full sweep with this kernel's
default, BBR.

The hardware comparison (quick, full) uses bic where the kernel has it and cubic otherwise: the
NetFPGA hosts and the 2012 emulation ran the Linux default of their day (BIC), so Reno there would
compare different congestion controls (design-notes section 5). The theory preset uses Reno, which
the sqrt(N) model assumes.
"""

from __future__ import annotations

from bufsize.topologies.config import available_congestion_controls, line_capacity_warning, shaper_choice
from bufsize.topologies.errors import MachineError, UsageError
from bufsize.topologies.machine import kernel_has_module, resolve_backend

PAPER_RATE_MBPS = 62.5
PAPER_RTT_MS = "87"
FULL_FLOWS = [2, 5, 10, 20, 50, 100, 200, 400, 600, 800]
# The main job's N: the hardware measured each of them (CS244 2012; why not N = 2: preset()).
QUICK_FLOWS = [10, 50, 200, 800]
# The Reno check needs fewer N (Reno's cycle at N=2 makes one search there take about half an hour).
THEORY_FLOWS = [2, 10, 50, 100, 200, 400, 800]
# Sender hosts: each point uses min(N, PRESET_MAX_HOSTS), CS244 2012's 400 at most, so N <= 400 keep one
# flow a host, as the hardware did. The host count does not move the answer on the line (the
# measurement is in docs/lab/), and with iperf's timer slack 400 hosts fit in the CPU the line leaves
# for the traffic on 2 cores (topologies/config.py LINE_MAX_HOSTS_PER_CPU).
PRESET_MAX_HOSTS = 400


def hardware_cc() -> str:
    return "bic" if "bic" in available_congestion_controls() or kernel_has_module("tcp_bic") else "cubic"


# Appenzeller 2004's Fig 11: OC3 (155 Mb/s), RTTs "about 80 ms" on average, N = 50..500 long Reno flows, the
# minimum buffer for 98 %, 99.5 % and 99.9 % (one sweep per --target; 98 % when none is given). The
# seed gives only the mean RTT; the spread is ours: 40..120 ms evenly over the hosts, wide enough that
# no two hosts share an RTT (desynchronized, as the figure's flows were) and mean 80.
FIG11_RATE_MBPS = 155.0
FIG11_RTT_MS = "40..120"
FIG11_FLOWS = [50, 100, 150, 200, 250, 300, 400, 500]
FIG11_TARGET = 0.98


# The shaper every preset was validated with, pinned so that a preset answers with the same method
# on every machine (a cloud VM's netem kernel included): the line (topologies/config.py says why).
PRESET_SHAPER = "line"
# Every preset searches by the precision rule on samples of two measured loss episodes: the quick
# one at +-20 % at 90 %, a quick look at every N.
QUICK_PRECISION = 0.2
# The other presets at +-10 % at 90 %, three runs a N: three give a spread (the CV), five would cost
# 5/3 the time, and a sweep runs every N of run 1 first, so a stopped sweep still covers every N.
# The sign test of the older committed sweeps is still there: `--precision 0 --samples 5
# --max-samples 20 --sample-length model --runs 5 --hosts 100 --max-sample-steal 0`.
FULL_PRECISION = 0.1
FULL_RUNS = 3
# The precision rule's settings as the full, theory, bbr and fig11 presets run them (quick: coarser).
PRECISE = {"samples": 3, "resolution": 0.05, "precision": FULL_PRECISION, "sample_length": "measured"}


def preset(name: str) -> dict:
    """Sweep settings a preset fixes; anything given on the command line overrides them."""
    base = {"rate_mbps": PAPER_RATE_MBPS, "rtt_ms": PAPER_RTT_MS, "max_hosts": PRESET_MAX_HOSTS,
            "shaper": PRESET_SHAPER}  # fmt: skip
    if name == "quick":
        # One run of four N by the precision rule at +-20 % (90 %), samples of two measured loss
        # episodes. Every N has a hardware median to compare with. Not N = 2: two cubic flows lose a
        # packet every few seconds, so near the answer their samples read either about 100 % or
        # about 97 %, and that one search would take as long as the other four together; the full
        # preset keeps it.
        return base | {"flows": QUICK_FLOWS, "runs": 1, "cc": hardware_cc(), **PRECISE, "resolution": 0.1,
                       "precision": QUICK_PRECISION}  # fmt: skip
    if name == "full":
        return base | {"flows": FULL_FLOWS, "runs": FULL_RUNS, "cc": hardware_cc(), **PRECISE}
    if name == "theory":
        return base | {"flows": THEORY_FLOWS, "runs": FULL_RUNS, "cc": "reno", **PRECISE}
    if name == "fig11":
        # One run a N and target, as the seed's figure; the full preset's rule (+-10 % at 90 %).
        return base | {"flows": FIG11_FLOWS, "runs": 1, "cc": "reno", "rate_mbps": FIG11_RATE_MBPS,
                       "rtt_ms": FIG11_RTT_MS, "target": FIG11_TARGET, **PRECISE}  # fmt: skip
    if name == "bbr":
        # The full sweep's link, N and rule with BBR, to set beside the BBR rule
        # (theory/ccrules.py) and the cubic full sweep. Samples span at least one ProbeRTT interval
        # (dynamics.sample_floor_s).
        return base | {"flows": FULL_FLOWS, "runs": FULL_RUNS, "cc": "bbr", **PRECISE}
    raise KeyError(name)


PRESETS = ("quick", "full", "theory", "fig11", "bbr")
# The method a search or sweep runs when no --preset is named: the full preset's, the method of the
# published figures (results/full/), so the obvious command measures what the figures show; flags
# still override any part of it, and --print-config shows what was resolved.
DEFAULT_PRESET = "full"


def preset_methods(qdiscs: dict[str, bool], delayline_built: bool, cpus: int | None = None) -> dict[str, dict]:
    """For `bufsize doctor`: the shaper and delay backend each preset gets on this machine, and why (or
    why it cannot run here)."""
    methods: dict[str, dict] = {}
    for name in PRESETS:
        p = preset(name)
        hosts = min(max(p["flows"]), p["max_hosts"])
        try:
            backend = resolve_backend("auto", qdiscs, delayline_built, p["shaper"])
            shaper, _ = shaper_choice(p["shaper"], backend, cpus)
        except (MachineError, UsageError) as e:
            methods[name] = {"runs": False, "why": str(e)}
            continue
        methods[name] = {
            "runs": True,
            "shaper": shaper,
            "delay_backend": backend,
            "most_hosts": hosts,
            "why": "pinned by the preset: the shaper its committed results were measured with"
            + ("; the delay line carries the delay too, although this kernel has netem" if qdiscs.get("netem") else ""),
            "warning": line_capacity_warning(shaper, hosts, cpus, rate_mbps=p["rate_mbps"]),
        }
    return methods


def format_preset_methods(methods: dict[str, dict]) -> str:
    lines = []
    for name, m in methods.items():
        if not m["runs"]:
            lines.append(f"preset {name + ':':8} cannot run here: {m['why']}")
            continue
        lines.append(
            f"preset {name + ':':8} shaper {m['shaper']}, delay {m['delay_backend']}, up to {m['most_hosts']} "
            f"sender hosts ({m['why']})"
        )
        if m["warning"]:
            lines.append(f"  warning: {m['warning']}")
    return "\n".join(lines)
