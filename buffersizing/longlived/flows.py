"""`bufsize flows`: start N long-lived flows, show they are all up and carrying data, then tear down."""

from __future__ import annotations

import time

from bufsize.scaffold.experiment import Experiment, Say
from bufsize.topologies.config import DumbbellConfig
from bufsize.topologies.units import check_number

# The bottleneck rate reported is bytes over the run: under a second it says little about
# whether the flows are carrying data.
MIN_DURATION_S = 1.0
MAX_DURATION_S = 3600.0


def check_duration(seconds: float) -> None:
    """--duration of `bufsize flows`."""
    check_number("--duration", seconds, MIN_DURATION_S, MAX_DURATION_S, lo_inclusive=True)


def run_flows(cfg: DumbbellConfig, backend: str, flows: int, tool: str, duration: float, say: Say) -> dict:
    check_duration(duration)
    t0 = time.monotonic()
    with Experiment(cfg, backend, "flows", None, say) as ex:
        assert ex.net is not None
        running = ex.start_flows(flows, tool)
        started = ex.started
        assert started is not None
        with ex.net.bottleneck.counters() as counters:
            first = counters.read()
            time.sleep(duration)
            last = counters.read()
        running.check()
    return {
        "flows": flows,
        "hosts": cfg.hosts,
        "tool": tool,
        "cc": cfg.cc,
        "congestion_controls_seen": ex.congestion_controls,
        "established": started.established,
        "seconds_to_all_established": started.seconds_to_all_established,
        "held_until_all_up": started.held_until_all_up,
        "bottleneck_rate_mbps": round((last.tx_bytes - first.tx_bytes) * 8 / (last.t - first.t) / 1e6, 3),
        "configured_rate_mbps": cfg.rate_mbps,
        "delay_backend": backend,
        "wall_seconds": round(time.monotonic() - t0, 2),
    }


def format_flows(s: dict, duration: float) -> str:
    held = "held until all were up" if s["held_until_all_up"] else "NOT held until all were up"
    return (
        f"{s['established']} of {s['flows']} flows established in {s['seconds_to_all_established']} s over "
        f"{s['hosts']} hosts ({s['tool']}, cc {s['cc']}: {s['congestion_controls_seen']}); {held}; "
        f"bottleneck {s['bottleneck_rate_mbps']} of {s['configured_rate_mbps']:g} Mb/s for {duration:g} s"
    )
