"""`bufsize course check DIR`: grades a student's answers.json (from the starter) against the toolkit's
arithmetic and the committed runs of the reference solution (results/course/run-*/answers.json).

Every answer is recomputed from what the student's run measured: gap 1 against the model, gap 2
from the saved rate samples, gap 3 from the probes the search made. The measured buffers are then
held against the range the committed runs span (widened for the noise of a single probe per buffer).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from bufsize.course import starter
from bufsize.scaffold.projectfiles import COURSE_RUNS_DIR
from bufsize.theory.model import stanford_packets
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.errors import UsageError
from bufsize.topologies.safefiles import read_bounded

# The committed runs span a range; a student's single-probe search lands within it, widened by these
# factors (a probe is one 6 s sample: the committed runs alone show how far one run moves the answer).
WIDEN_LOW, WIDEN_HIGH = 0.5, 1.5
# A starter's answers.json is a few KB: anything past this is not one.
ANSWERS_LIMIT_BYTES = 1 << 20
THEORY_REL_TOL = 0.005
UTIL_ABS_TOL = 1e-6


@dataclass
class Check:
    name: str
    passed: bool
    detail: str


def load_answers(path: Path) -> dict:
    f = path / "answers.json" if path.is_dir() else path
    try:
        data = json.loads(read_bounded(f, ANSWERS_LIMIT_BYTES))
    except FileNotFoundError:
        raise UsageError(f"{f}: not found (the starter writes answers.json into its --out directory)") from None
    except (OSError, ValueError, RecursionError) as e:  # ValueError: bad UTF-8, bad JSON, a 5,000-digit int
        raise UsageError(f"{f}: not readable as the starter's answers.json ({type(e).__name__}: {e})") from None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("points"), list)
        or not isinstance(data.get("config"), dict)
    ):
        raise UsageError(f"{f}: not the starter's answers.json (no config and points)")
    for p in data["points"]:
        for key in ("flows", "found_packets"):
            v = p.get(key) if isinstance(p, dict) else None
            if v is not None and not (isinstance(v, int | float) and -1e9 <= v <= 1e9):
                raise UsageError(f"{f}: a point's {key} is {str(v)[:40]}, not a number the starter writes")
    return data


def committed_runs(runs_dir: Path = COURSE_RUNS_DIR) -> list[dict]:
    return [load_answers(p) for p in sorted(runs_dir.glob("run-*/answers.json"))]


def expected_ranges(runs: list[dict]) -> dict[int, tuple[int, int, list[int]]]:
    """Per N: the lowest and highest buffer a passing run may find, and the committed runs' answers."""
    found: dict[int, list[int]] = {}
    for run in runs:
        for p in run["points"]:
            found.setdefault(int(p["flows"]), []).append(int(p["found_packets"]))
    return {
        n: (max(1, math.floor(WIDEN_LOW * min(xs))), math.ceil(WIDEN_HIGH * max(xs)), sorted(xs))
        for n, xs in found.items()
    }


def theory(flows: int) -> float:
    return stanford_packets(starter.RTT_MS / 1e3, starter.RATE_MBPS * 1e6, flows, FRAME_BYTES)


def _number(x: object) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) else None


def check_point(p: dict, target: float) -> list[Check]:
    n = p.get("flows")
    if not isinstance(n, int) or n < 1:
        return [Check("point", False, f"a point without a valid number of flows: {n!r}")]
    out = []
    t = _number(p.get("theory_packets"))
    want = theory(n)
    ok = t is not None and math.isclose(t, want, rel_tol=THEORY_REL_TOL)
    given = f"{t:.2f}" if t is not None else repr(p.get("theory_packets"))
    out.append(Check(f"gap 1, theory, N={n}", ok, f"{given} packets; RTT*C/sqrt(N) = {want:.2f}"))

    probes = p.get("probes") if isinstance(p.get("probes"), list) else []
    bad = []
    for pr in probes:
        rates = pr.get("rates_mbps") if isinstance(pr, dict) else None
        u = _number(pr.get("utilization")) if isinstance(pr, dict) else None
        if not isinstance(rates, list) or not rates or u is None or any(_number(r) is None for r in rates):
            bad.append(f"probe {pr!r:.60}: no rates or utilization")
            continue
        mean = statistics.fmean(rates) / starter.RATE_MBPS
        if abs(u - mean) > UTIL_ABS_TOL:
            bad.append(f"buffer {pr.get('buffer_packets')}: {u:.4f}, the samples say {mean:.4f}")
    detail = (
        "; ".join(bad[:3])
        if bad
        else (f"{len(probes)} probes, each the mean of its rate samples over the link's {starter.RATE_MBPS:g} Mb/s")
    )
    out.append(Check(f"gap 2, utilization, N={n}", bool(probes) and not bad, detail))

    found, bdp = p.get("found_packets"), p.get("bdp_packets")
    usable = [
        (pr["buffer_packets"], float(pr["utilization"]))
        for pr in probes
        if isinstance(pr, dict)
        and isinstance(pr.get("buffer_packets"), int)
        and _number(pr.get("utilization")) is not None
    ]
    passing = sorted(b for b, u in usable if u >= target)
    failing = {b for b, u in usable if u < target}
    why = []
    if not isinstance(found, int) or not isinstance(bdp, int):
        why.append(f"found_packets {found!r} / bdp_packets {bdp!r} are not whole numbers")
    else:
        smallest = passing[0] if passing else bdp  # the search assumes the top of its range passes
        if found != smallest:
            why.append(f"found {found}, but the smallest buffer that passed was {smallest}")
        if found > 1 and found - 1 not in failing:
            why.append(f"found {found}, but {found - 1} was never probed and seen to fail")
        limit = math.ceil(math.log2(max(bdp, 2))) + 1
        if len(probes) > limit:
            why.append(f"{len(probes)} probes for a range of {bdp} buffers: a binary search needs at most {limit}")
    detail = "; ".join(why) or f"{found} packets: the smallest that passed, one less failed ({len(probes)} probes)"
    out.append(Check(f"gap 3, search, N={n}", not why, detail))
    return out


def grade(answers: dict, runs: list[dict]) -> list[Check]:
    cfg = answers["config"]
    if not isinstance(answers.get("points"), list) or not isinstance(cfg, dict):
        raise UsageError("not the starter's answers.json (no config and points)")
    want_cfg = {"hosts": starter.HOSTS, "rate_mbps": starter.RATE_MBPS, "rtt_ms": starter.RTT_MS, "cc": starter.CC}
    differs = {k: cfg.get(k) for k, v in want_cfg.items() if cfg.get(k) != v}
    target = _number(cfg.get("target")) or starter.TARGET
    flows = [p.get("flows") if isinstance(p, dict) else None for p in answers["points"]]
    whole = all(isinstance(n, int) and not isinstance(n, bool) for n in flows)
    timing = answers.get("timing") if isinstance(answers.get("timing"), dict) else {}
    want_timing = {"sample_s": starter.SAMPLE_S, "probe_s": starter.PROBE_S, "settle_s": starter.SETTLE_S}
    differs |= {k: timing.get(k) for k, v in want_timing.items() if timing.get(k) != v}
    same = not differs and target == starter.TARGET and whole and sorted(flows) == sorted(starter.FLOWS)
    checks = [
        Check(
            "configuration",
            same,
            f"the handout's: {want_cfg | want_timing}, N {list(starter.FLOWS)}"
            if same
            else f"differs from the handout's: {differs}, target {target}, N {flows}",
        )
    ]
    for p in answers["points"]:
        checks += check_point(p, target) if isinstance(p, dict) else [Check("point", False, f"{p!r:.60}")]
    if not checks[0].passed:
        return checks  # the committed ranges are for the handout's configuration only
    ranges = expected_ranges(runs)
    if not ranges:
        return [*checks, Check("measured ranges", False, f"no committed runs in {COURSE_RUNS_DIR}")]
    found = {p["flows"]: p.get("found_packets") for p in answers["points"]}  # whole numbers: checked above
    for n in sorted(found):
        if n not in ranges:
            checks.append(Check(f"measured, N={n}", False, f"no committed run has N={n} ({COURSE_RUNS_DIR})"))
            continue
        lo, hi, seen = ranges[n]
        f = found[n]
        ok = isinstance(f, int) and lo <= f <= hi
        checks.append(Check(f"measured, N={n}", ok, f"{f} packets; expected {lo} to {hi} (committed runs: {seen})"))
    small, large = min(found), max(found)
    per_run = [{q["flows"]: q["found_packets"] for q in run["points"]} for run in runs]
    falls = all(small in r and large in r and r[large] < r[small] for r in per_run)
    if falls:
        f_small, f_large = found[small], found[large]
        ok = isinstance(f_small, int) and isinstance(f_large, int) and f_large < f_small
        checks.append(Check("the buffer falls with N", ok, f"{f_small} packets at N={small}, {f_large} at N={large}"))
    return checks


def report(checks: list[Check]) -> str:
    lines = [f"{'PASS' if c.passed else 'FAIL'}  {c.name}: {c.detail}" for c in checks]
    failed = sum(not c.passed for c in checks)
    lines.append(f"{len(checks) - failed} of {len(checks)} checks passed" + ("" if failed else ": all"))
    return "\n".join(lines)


def as_json(checks: list[Check]) -> str:
    return json.dumps({"passed": all(c.passed for c in checks), "checks": [asdict(c) for c in checks]}, indent=1)
