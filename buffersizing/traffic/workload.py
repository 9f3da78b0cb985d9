"""Short-flow workloads: transfer sizes and arrival processes (what the generator runs, no I/O here).

A size is in bytes of TCP payload. "Packets" mean full segments of MSS_BYTES, the payload of a
1514-byte frame with TCP timestamps, as the seeds count flow length in packets.

Size distributions, given as text on the command line (`--sizes`):
    fixed:L                  every transfer L
    uniform:A:B              uniform from A to B
    exp:MEAN                 exponential with that mean
    expmix:P1@M1+P2@M2+...   a mixture of exponentials (weights P, means M)
    pareto:ALPHA:MIN         Pareto (shape ALPHA, smallest MIN)
    lnpareto:MU:SIGMA:CUT:ALPHA:PTAIL   lognormal body (ln of bytes) below CUT, Pareto tail above
                             it with weight PTAIL, the shape of web-traffic models
    web                      lnpareto with SURGE's fitted values (Barford and Crovella 1998)
Lengths (L, MEAN, MIN, CUT) are packets, or bytes with a B, KB or MB suffix (10 = 10 packets,
20KB = 20000 bytes). Every distribution is capped at `cap_bytes` (heavy tails would otherwise
produce transfers longer than the run); the mean used for the load counts the cap.

Arrivals: open loop (Poisson at an offered load, each arrival on the next sender host in turn)
and closed loop (users who transfer, think, and repeat; think times exponential, or Pareto with
shape 1.5 as SURGE's inactive OFF times, both with the mean asked).
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import asdict, dataclass

from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.errors import UsageError

MSS_BYTES = 1448  # 1500-byte MTU less IP, TCP and the 12-byte timestamp option
FRAME_OVERHEAD = FRAME_BYTES - MSS_BYTES  # 66 bytes of headers per full data segment on the wire
CONTROL_FRAMES = 3  # SYN, the handshake's ACK, and the ACK of the receiver's FIN, sender to receiver
HEADER_BYTES = 16  # the generator's own header (transfer id and size) opens every transfer
DEFAULT_CAP_BYTES = 10_000_000
# SURGE's fits (bytes): lognormal body mu 9.357, sigma 1.318; Pareto tail alpha 1.1 from 133 KB, 7 %.
WEB = (9.357, 1.318, 133_000.0, 1.1, 0.07)
THINK_KINDS = ("exp", "pareto")
THINK_PARETO_ALPHA = 1.5  # SURGE's inactive OFF times: Pareto, k = 1 s, alpha 1.5 (mean 3 s)


def parse_length(text: str) -> float:
    """'14' -> 14 packets of MSS_BYTES; '20KB' -> 20000 bytes (decimal units)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(B|KB|MB|p)?\s*", text)
    if not m:
        raise UsageError(f"{text!r} is not a length: give packets (14) or bytes (1500B, 20KB, 1MB)")
    value, unit = float(m[1]), m[2] or "p"
    scale = {"p": MSS_BYTES, "B": 1, "KB": 1000, "MB": 1_000_000}[unit]
    return value * scale


@dataclass(frozen=True)
class SizeDistribution:
    """A transfer-size distribution in bytes, parsed from its text; draw() and mean_bytes()."""

    spec: str
    kind: str
    params: tuple[float, ...]
    cap_bytes: int = DEFAULT_CAP_BYTES

    @staticmethod
    def parse(spec: str, cap_bytes: int = DEFAULT_CAP_BYTES) -> SizeDistribution:
        if not HEADER_BYTES <= cap_bytes <= 10**10:
            raise UsageError(f"--max-size {cap_bytes}: must be from {HEADER_BYTES} bytes to 10 GB")
        kind, _, rest = spec.strip().partition(":")
        parts = [p for p in rest.split(":")] if rest else []
        try:
            params = _parse_params(kind, parts)
        except (ValueError, IndexError, UsageError) as e:
            raise UsageError(f"--sizes {spec}: {e}") from e
        return SizeDistribution(spec.strip(), kind, params, cap_bytes)

    def draw(self, rng: random.Random) -> int:
        """One size: at least the generator's header, at most the cap."""
        x = self._draw_raw(rng)
        return int(min(max(round(x), HEADER_BYTES), self.cap_bytes))

    def _draw_raw(self, rng: random.Random) -> float:
        p = self.params
        if self.kind == "fixed":
            return p[0]
        if self.kind == "exp":
            return rng.expovariate(1 / p[0])
        if self.kind == "uniform":
            return rng.uniform(p[0], p[1])
        if self.kind == "expmix":
            u, acc = rng.random() * sum(p[0::2]), 0.0
            for w, mean in zip(p[0::2], p[1::2], strict=True):
                acc += w
                if u <= acc:
                    return rng.expovariate(1 / mean)
            return rng.expovariate(1 / p[-1])
        if self.kind == "pareto":
            alpha, lo = p
            return lo * (1 - rng.random()) ** (-1 / alpha)
        mu, sigma, cut, alpha, ptail = p  # lnpareto
        if rng.random() < ptail:
            return cut * (1 - rng.random()) ** (-1 / alpha)
        while True:  # the body below the cut (rejection: most draws fall below it)
            x = rng.lognormvariate(mu, sigma)
            if x < cut:
                return x

    def mean_bytes(self) -> float:
        """E[size] with the floor and the cap applied (exactly for fixed and Pareto tails; by a
        fixed-seed sample of 200,000 for the others, whose truncation has no neat closed form)."""
        c = self.cap_bytes
        if self.kind == "fixed":
            return float(min(max(round(self.params[0]), HEADER_BYTES), c))
        if self.kind == "pareto":
            alpha, lo = self.params
            if lo >= c:
                return float(c)
            return _capped_pareto_mean(alpha, lo, c)
        rng = random.Random(12345)
        n = 200_000
        return sum(self.draw(rng) for _ in range(n)) / n

    def to_dict(self) -> dict:
        return asdict(self) | {"mean_bytes": round(self.mean_bytes(), 1)}


def _capped_pareto_mean(alpha: float, lo: float, cap: float) -> float:
    """E[min(X, cap)] for X ~ Pareto(alpha, lo), lo < cap."""
    if abs(alpha - 1) < 1e-12:
        return lo * (1 + math.log(cap / lo))
    return (alpha * lo - lo**alpha * cap ** (1 - alpha)) / (alpha - 1)


def _positive(name: str, x: float) -> float:
    if not (math.isfinite(x) and x > 0):
        raise ValueError(f"{name} must be a positive number, not {x:g}")
    return x


def _parse_params(kind: str, parts: list[str]) -> tuple[float, ...]:
    def want(n: int) -> None:
        if len(parts) != n:
            raise ValueError(f"{kind} takes {n} value{'s' if n != 1 else ''} after the colon, got {len(parts)}")

    if kind == "fixed":
        want(1)
        return (_positive("the length", parse_length(parts[0])),)
    if kind == "exp":
        want(1)
        return (_positive("the mean", parse_length(parts[0])),)
    if kind == "uniform":
        want(2)
        lo, hi = _positive("the smallest", parse_length(parts[0])), _positive("the largest", parse_length(parts[1]))
        if lo > hi:
            raise ValueError(f"the smallest ({parts[0]}) is above the largest ({parts[1]})")
        return (lo, hi)
    if kind == "expmix":
        want(1)
        out: list[float] = []
        for term in parts[0].split("+"):
            w, sep, mean = term.partition("@")
            if not sep:
                raise ValueError(f"expmix term {term!r}: write WEIGHT@MEAN, e.g. 0.9@10+0.1@1000")
            out += [_positive("a weight", float(w)), _positive("a mean", parse_length(mean))]
        return tuple(out)
    if kind == "pareto":
        want(2)
        alpha = _positive("the shape", float(parts[0]))
        return (alpha, _positive("the smallest size", parse_length(parts[1])))
    if kind == "lnpareto":
        want(5)
        mu, sigma = float(parts[0]), _positive("sigma", float(parts[1]))
        cut, alpha = _positive("the cut", parse_length(parts[2])), _positive("the shape", float(parts[3]))
        ptail = float(parts[4])
        if not 0 <= ptail <= 1:
            raise ValueError(f"the tail weight {ptail:g} must be from 0 to 1")
        return (mu, sigma, cut, alpha, ptail)
    if kind == "web":
        want(0)
        return WEB
    raise ValueError(f"unknown distribution {kind!r}: fixed, uniform, exp, expmix, pareto, lnpareto or web")


def wire_bytes(size_bytes: float) -> float:
    """Bytes a transfer puts on the bottleneck toward the receiver: data frames and the control
    frames of its connection (what an offered load is a fraction of; tc counts whole frames)."""
    segments = math.ceil(size_bytes / MSS_BYTES)
    return size_bytes + segments * FRAME_OVERHEAD + CONTROL_FRAMES * FRAME_OVERHEAD


@dataclass(frozen=True)
class Workload:
    """What the short-flow generator runs. Open loop if load > 0, closed loop if users > 0, or both.

    It stops starting transfers after `duration_s`, or once `transfers` have started (open loop: in
    all; closed loop: per user), whichever comes first; either may be None, not both.
    """

    sizes: str = "fixed:14"
    load: float = 0.0  # offered load of the open-loop arrivals, a fraction of the bottleneck rate
    users: int = 0
    think_s: float = 1.0  # mean think time of a closed-loop user (0: back to back)
    think: str = "exp"  # its distribution: exp, or pareto (shape 1.5: SURGE's OFF times)
    transfers: int | None = None
    duration_s: float | None = None
    seed: int = 1
    cap_bytes: int = DEFAULT_CAP_BYTES
    timeout_s: float = 120.0  # a transfer not done by then is recorded as failed

    def validate(self) -> SizeDistribution:
        dist = SizeDistribution.parse(self.sizes, self.cap_bytes)
        if not (math.isfinite(self.load) and 0 <= self.load <= 2):
            raise UsageError(f"--load {self.load:g}: must be from 0 to 2 (a fraction of the bottleneck rate)")
        if not 0 <= self.users <= 2000:
            raise UsageError(f"--users {self.users}: must be from 0 to 2000")
        if self.load == 0 and self.users == 0:
            raise UsageError("no short flows: give --load (open loop) or --users (closed loop), or both")
        if not (math.isfinite(self.think_s) and 0 <= self.think_s <= 3600):
            raise UsageError(f"--think-s {self.think_s:g}: must be from 0 to 3600")
        if self.think not in THINK_KINDS:
            raise UsageError(f"--think {self.think}: exp or pareto")
        if self.transfers is None and self.duration_s is None:
            raise UsageError("give --transfers or --duration: when the workload stops starting transfers")
        if self.transfers is not None and not 1 <= self.transfers <= 10_000_000:
            raise UsageError(f"--transfers {self.transfers}: must be from 1 to 10000000")
        if self.duration_s is not None and not (math.isfinite(self.duration_s) and 0 < self.duration_s <= 24 * 3600):
            raise UsageError(f"--duration {self.duration_s:g}: must be more than 0 s and at most a day")
        if not (math.isfinite(self.timeout_s) and 1 <= self.timeout_s <= 3600):
            raise UsageError(f"--timeout-s {self.timeout_s:g}: must be from 1 to 3600 s")
        if not 0 <= self.seed < 2**32:
            raise UsageError(f"--seed {self.seed}: must be from 0 to 4294967295")
        return dist

    def arrival_rate(self, rate_mbps: float) -> float:
        """Open-loop transfers per second that offer `load` x the bottleneck rate in frames."""
        dist = self.validate()
        return self.load * rate_mbps * 1e6 / 8 / expected_wire_bytes(dist)

    def to_dict(self) -> dict:
        return asdict(self)


def think_time(w: Workload, rng: random.Random) -> float:
    """One think time of a closed-loop user, with mean w.think_s."""
    if w.think_s <= 0:
        return 0.0
    if w.think == "pareto":  # scale k from the mean: E = alpha k / (alpha - 1)
        k = w.think_s * (THINK_PARETO_ALPHA - 1) / THINK_PARETO_ALPHA
        return k * (1 - rng.random()) ** (-1 / THINK_PARETO_ALPHA)
    return rng.expovariate(1 / w.think_s)


def expected_wire_bytes(dist: SizeDistribution) -> float:
    """E[wire bytes of a transfer]: exact for fixed sizes, otherwise by the same fixed-seed sample."""
    if dist.kind == "fixed":
        return wire_bytes(dist.mean_bytes())
    rng = random.Random(12345)
    n = 100_000
    return sum(wire_bytes(dist.draw(rng)) for _ in range(n)) / n


def open_loop_arrivals(rate_per_s: float, rng: random.Random, limit: int | None, horizon_s: float | None):
    """Poisson arrival times (s from the start): until `limit` of them or past `horizon_s`."""
    t, k = 0.0, 0
    while limit is None or k < limit:
        t += rng.expovariate(rate_per_s)
        if horizon_s is not None and t > horizon_s:
            return
        yield t
        k += 1
