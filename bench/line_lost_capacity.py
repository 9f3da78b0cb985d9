"""How much of a search's shortfall from full utilization is capacity the line itself lost (issue 33).

The line shaper sends each frame at its exact start time; when its process wakes later than its
catch-up allowance (delayline.c's burst: 2 ms of the rate, 2 to 10 frames), the time past the
allowance is lost for good, as HTB loses it past its burst. Every measurement of a search records
that loss since 2026-11-28 (`measurements[].delay_line.line_lost_ms` over `seconds`). This reads
the recorded searches and sets, per measurement, the share of the line's time lost against the
shortfall 1 - mean utilization, over all measurements and over those whose queue was empty less
than 0.1 % of the time (there no buffer can lift utilization: what is short is the line's service).
Per search: median and largest share lost, median shortfall, Pearson's r of the two. No traffic:
it reads result.json files.

    .venv/bin/python bench/line_lost_capacity.py results/fig11/2026-11-27-995 results/fig11/2026-11-27-999
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from bufsize.topologies.delay import line_lost_share as lost_share

NEVER_EMPTY = 0.001  # queue empty less than this share of a measurement's samples


def never_empty(rows: list[tuple[float, float, float | None]]) -> list[tuple[float, float, float | None]]:
    return [r for r in rows if r[2] is not None and r[2] < NEVER_EMPTY]


def measurement_rows(result: dict) -> list[tuple[float, float, float | None]]:
    """(share of the line's time lost, 1 - mean utilization, queue's empty share) per measurement
    that recorded the line's loss."""
    rows = []
    for m in result.get("measurements", []):
        lost = lost_share(m.get("delay_line"))
        if lost is None:
            continue
        short = 1 - statistics.mean(m["utilization"])
        empty = (m.get("queue") or {}).get("empty_fraction")
        rows.append((lost, short, empty))
    return rows


def pct(x: float) -> str:
    return f"{x * 100:.2f}"


def correlation(rows: list[tuple[float, float, float | None]]) -> str:
    lost = [r[0] for r in rows]
    short = [r[1] for r in rows]
    if len(rows) < 3 or statistics.pstdev(lost) == 0 or statistics.pstdev(short) == 0:
        return "-"
    return f"{statistics.correlation(lost, short):.2f}"


def search_row(name: str, result: dict, rows: list) -> str:
    lost = [r[0] for r in rows]
    short = [r[1] for r in rows]
    full = never_empty(rows)
    full_cell = (
        f"{len(full)}: {pct(statistics.median(r[0] for r in full))} / {pct(statistics.median(r[1] for r in full))}"
        if full
        else "0"
    )
    return (
        f"| {name} | {result['buffer_packets']} | {len(rows)} | {pct(statistics.median(lost))} "
        f"[{pct(max(lost))}] | {pct(statistics.median(short))} | {correlation(rows)} | {full_cell} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweeps", nargs="+", type=Path, help="sweep directories (nNNNN-runK/result.json inside)")
    ap.add_argument("--out", type=Path, help="write the table here too")
    args = ap.parse_args()
    lines = [
        "# The line's lost time against the shortfall from full utilization",
        "",
        f"`.venv/bin/python bench/line_lost_capacity.py {' '.join(str(s) for s in args.sweeps)}`"
        " (bench/line_lost_capacity.py says what each column is).",
        "",
        "| search | answer, packets | measurements | line's time lost, %: median [max] "
        "| shortfall 1 - util, % (median) | r (lost, shortfall) "
        "| queue never empty: n: lost / shortfall, % (medians) |",
        "|---|---|---|---|---|---|---|",
    ]
    pooled: list[tuple[float, float, float | None]] = []
    skipped = []
    for sweep in args.sweeps:
        for f in sorted(sweep.glob("n*-run*/result.json")):
            result = json.loads(f.read_text())
            rows = measurement_rows(result)
            name = f"{sweep.name}/{f.parent.name}"
            if not rows:
                skipped.append(name)
                continue
            pooled += rows
            lines.append(search_row(name, result, rows))
    full = never_empty(pooled)
    lines.append("")
    lines.append(
        f"Pooled: {len(pooled)} measurements, r = {correlation(pooled)}; with the queue never empty "
        f"{len(full)}, r = {correlation(full)}, shortfall less the time lost: median "
        f"{pct(statistics.median(r[1] - r[0] for r in full)) if full else '-'} %."
    )
    if skipped:
        lines.append(f"Not recorded (searches before 2026-11-28): {', '.join(skipped)}.")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
