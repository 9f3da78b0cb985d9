"""The emulation's measure on the twin: the same warm-up, reference and per-buffer measurement
(longlived/measure.py, on the link interface), so one configuration's utilization on either link
comes from the same steps and lands in the same keys.

What differs: time is simulated, so there is no CPU, pacing-fidelity or leftover check, and the
flows may start below the warm-up buffer (--start-buffer) to spare the simulator slow start's
overshoot at high rates.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from bufsize.longlived.measure import (
    MeasureOptions,
    measure_buffer,
    point_fields,
    point_line,
    warm_and_reference,
    warm_buffer_bytes,
)
from bufsize.scaffold.link import SimulatedLink
from bufsize.scaffold.resultdir import write_json_atomic
from bufsize.scaffold.schema import stamp
from bufsize.sim.search import GOOD_REFERENCE, simulator_manifest, start_packets
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.nssim import SimConfig, SimDumbbell
from bufsize.topologies.safefiles import make_dirs


def run_sim_measure(
    cfg: SimConfig,
    buffers_packets: list[int],
    opts: MeasureOptions,
    out: Path | None = None,
    say: Callable[[str], None] = print,
    start_buffer: str = "calibration",
) -> dict:
    """The flows warm up (at `start_buffer`, then the warm-up buffer), the reference is taken, then
    each buffer is measured in turn; with `out`, result.json is written there."""
    opts.validate(cfg)
    cfg.validate(opts.flows)
    buffers_bytes = [b * FRAME_BYTES for b in buffers_packets]
    warm_buffer = warm_buffer_bytes(cfg, buffers_bytes, opts)
    start = start_packets(start_buffer, warm_buffer // FRAME_BYTES, min(buffers_packets), opts.flows)
    t_wall = time.monotonic()
    say(
        f"sim measure: {opts.flows} flows over {cfg.hosts} hosts, {cfg.rate_mbps:g} Mb/s, RTT "
        f"{min(cfg.rtt_ms):g}..{max(cfg.rtt_ms):g} ms, cc {cfg.cc}, seed {cfg.seed}; buffers "
        f"{', '.join(map(str, buffers_packets))} packets, {opts.duration_s:g} s each"
    )
    with SimDumbbell(cfg, opts.flows, start) as net:
        link = SimulatedLink(net)

        def warm(seconds: float) -> None:
            net.run(seconds)  # at the start buffer, then grown into the warm-up buffer where it is larger
            if start * FRAME_BYTES != warm_buffer:
                net.set_buffer(warm_buffer // FRAME_BYTES)
                net.run(seconds)
            say(f"  warmed up to {net.sim_seconds:.1f} s at {warm_buffer // FRAME_BYTES} packets")

        reference = warm_and_reference(link, opts.flows, warm_buffer, opts, warm, say)
        points = []
        for b in buffers_bytes:
            points.append(measure_buffer(link, opts.flows, b, opts))
            say(point_line(points[-1], link.clock_text()))
        up, simulated = net.flows_up(), net.sim_seconds
    flags = {
        "flows_up": up == opts.flows,
        "reference_near_nominal": reference >= GOOD_REFERENCE * cfg.rate_mbps if reference is not None else None,
    }
    result = {
        "kind": "sim-measure",
        "flows": opts.flows,
        "flows_up": up,
        "hosts": cfg.hosts,
        "cc": cfg.cc,
        "seed": cfg.seed,
        "nominal_rate_mbps": cfg.rate_mbps,
        "reference_rate_mbps": round(reference, 3) if reference is not None else None,
        "start_buffer_packets": start,
        **point_fields(cfg, points),
        "valid": all(v is not False for v in flags.values()),
        "flags": flags,
        "simulated_seconds": round(simulated, 3),
        "wall_seconds": round(time.monotonic() - t_wall, 1),
        "options": {k: v for k, v in vars(opts).items() if k not in ("tool", "fidelity_s")},
        "config": cfg.to_dict(),
        "manifest": simulator_manifest(cfg),
    }
    result = stamp(result, "result")
    if out is not None:
        make_dirs(out)
        write_json_atomic(out / "result.json", result)
    return result
