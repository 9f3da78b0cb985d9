"""A simulated link for tuning and testing the search offline: utilization against buffer, with the
noise of the committed searches' samples.

Near the answer the committed searches read a utilization deficit (1 - utilization) that falls as a
power of the buffer: at N = 10 (cubic, 62.5 Mb/s, 87 ms) 0.018 at 35 packets, 0.010 at 50, 0.003 at
71 (exponent about 2.5); at N = 100 0.043 at 7, 0.021 at 9, 0.008 at 11 (about 4). Samples scatter
around the curve with a standard deviation of 0.003-0.009 (one sample of 3-6 s), and about one in
forty reads a few percent low (a flow in a timeout): the full sweep's samples.csv files.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bufsize.topologies import FRAME_BYTES


@dataclass(frozen=True)
class LinkModel:
    name: str
    crossing: float  # packets at which the noiseless utilization is exactly the target
    exponent: float  # of the deficit's power law
    noise: float  # standard deviation of one sample
    outlier_every: int = 0  # about one sample in this many reads `outlier_drop` lower (0: none)
    outlier_drop: float = 0.03
    hi_packets: int = 898  # the search's top (2 BDP at 62.5 Mb/s, 87 ms)
    first_guess: int | None = None  # RTT*C/sqrt(N)
    target: float = 0.99
    # Sample noise drawn from these (utilization less its measurement's median), in place of `noise`
    # and the outliers: the committed samples' own heavy, one-sided tail.
    residuals: tuple[float, ...] = ()


# The four regimes of the committed cubic searches, and a curve flatter than its noise.
MODELS = {
    "n2": LinkModel("n2", 105.0, 2.7, 0.008, 0, first_guess=318),
    "n10": LinkModel("n10", 50.0, 2.5, 0.008, 40, first_guess=142),
    "n100": LinkModel("n100", 10.5, 4.0, 0.004, 0, first_guess=45),
    "n400": LinkModel("n400", 6.8, 4.5, 0.004, 40, first_guess=22),
    "flat": LinkModel("flat", 50.0, 0.4, 0.008, 0, first_guess=142),
}


class SimLink:
    """measure(buffer_bytes, n) of the search, drawing samples from a LinkModel."""

    def __init__(self, model: LinkModel, seed: int = 1) -> None:
        self.model = model
        self.rng = random.Random(seed)
        self.samples = 0
        self.settles = 0  # calls at a buffer other than the previous one: each costs a settle time
        self.last: int | None = None

    def utilization(self, packets: float) -> float:
        m = self.model
        return 1 - (1 - m.target) * (packets / m.crossing) ** -m.exponent

    def answer(self) -> int:
        """The smallest whole number of packets whose noiseless utilization reaches the target."""
        whole = int(self.model.crossing)
        return whole if whole >= self.model.crossing else whole + 1

    def __call__(self, buffer_bytes: int, n: int) -> list[float]:
        packets = buffer_bytes // FRAME_BYTES
        if packets != self.last:
            self.settles += 1
            self.last = packets
        out = []
        for _ in range(n):
            self.samples += 1
            m = self.model
            if m.residuals:
                out.append(self.utilization(packets) + self.rng.choice(m.residuals))
                continue
            v = self.utilization(packets) + self.rng.gauss(0, m.noise)
            if m.outlier_every and self.rng.random() < 1 / m.outlier_every:
                v -= m.outlier_drop
            out.append(v)
        return out
