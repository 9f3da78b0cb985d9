"""What a long run shows while it runs: on a terminal a live bar (tqdm) with the ETA and the current
probe on the line beneath it; anywhere else (a log file, CI, a pipe) the same events as plain lines.

A Display is a Say (a function of one line), so the code that reports progress is the same either way;
lines that describe the probe under way replace each other on the status line instead of scrolling.
tqdm draws the bar: it keeps its lines in place and lets other lines print above them.
"""

from __future__ import annotations

import sys
from typing import TextIO

# A line that reports the probe under way (longlived/search.py): it goes on the status line when live.
PROBE_PREFIX = "  probe "


class Display:
    def __init__(self, stream: TextIO | None = None, live: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.bar = self.status = None

    def __call__(self, line: str) -> None:
        if self.bar is None:
            print(line, file=self.stream, flush=True)
        elif line.startswith(PROBE_PREFIX):
            self.status.set_description_str(line.strip())
        else:
            self.bar.write(line, file=self.stream)

    def start(self, total: int, done: int, unit: str = "point") -> None:
        """The bar of `total` steps, `done` of them already finished (a resumed sweep); plain: nothing."""
        if not self.live:
            return
        from tqdm import tqdm

        # leave=False: both lines go when the run ends, which then prints its closing line in their place.
        self.bar = tqdm(total=total, initial=done, unit=unit, file=self.stream, dynamic_ncols=True, leave=False,
                        bar_format="{desc} |{bar}| {n_fmt}/{total_fmt} {unit}s{postfix}")  # fmt: skip
        self.status = tqdm(total=0, position=1, bar_format="{desc}", file=self.stream, dynamic_ncols=True,
                           leave=False)  # fmt: skip

    def showing(self) -> bool:
        return self.bar is not None

    def step(self, done: int, what: str, times: str) -> None:
        """The live bar at `done` steps, naming what runs now, with its elapsed time and ETA."""
        self.bar.n = done
        self.bar.set_description_str(what)
        self.bar.set_postfix_str(times)
        self.status.set_description_str("")

    def close(self) -> None:
        for b in (self.status, self.bar):
            if b is not None:
                b.close()
        self.bar = self.status = None
