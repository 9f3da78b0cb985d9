"""The search's stopping rules side by side on the simulated link (issue 30, item 5): no traffic.

Each model (buffersizing/longlived/simlink.py) has the curve and the sample noise of one regime of
the committed cubic searches. Both rules search it with the same seeds: the presets' sequential
sign test (5 to 20 samples a probe, re-checks, 5 % resolution) and the precision rule (3 samples a
probe, stop at +-10 % with 90 % confidence). Reported per model and rule over the seeds: the answer's
median [range] and CV against the true answer, how often the reported interval holds the true
crossing, samples and settles (buffer changes) per search, and a wall time per search from those
counts with the settle and sample lengths the toolkit uses at that N (dynamics.auto_timing; cubic,
62.5 Mb/s, 87 ms). The wall time is a prediction: fixed costs (set-up, warm-up, calibration) are
left out, and real samples may be noisier than the models.

    .venv/bin/python bench/search_rule_offline.py --seeds 30 > bench/results/search-rule-offline.md

With --noise committed the N = 2 to 400 models draw each sample's noise from the committed full
sweep's own samples (each less its measurement's median, that median itself left out), tail and all.
--noise-estimate rms runs the precision rule with the noise estimate it had before the trimmed one.
"""

from __future__ import annotations

import argparse
import collections
import csv
import statistics
import time
from dataclasses import replace
from pathlib import Path

from bufsize.longlived import crossing
from bufsize.longlived.dynamics import auto_timing
from bufsize.longlived.median_search import MedianSearch
from bufsize.longlived.simlink import MODELS, LinkModel, SimLink
from bufsize.topologies import FRAME_BYTES

FLOWS = {"n2": 2, "n10": 10, "n100": 100, "n400": 400, "flat": 10}
COMMITTED = Path(__file__).resolve().parent.parent / "results" / "full" / "2026-11-25"


def committed_residuals(flows: int) -> tuple[float, ...]:
    """Every committed sample at `flows` less its measurement's median, without the median itself."""
    out: list[float] = []
    for f in sorted(COMMITTED.glob(f"n{flows:04d}-run*/samples.csv")):
        groups: dict[str, list[float]] = collections.defaultdict(list)
        with f.open() as fh:
            for row in csv.DictReader(fh):
                groups[row["measurement"]].append(float(row["util"]))
        for g in groups.values():
            if len(g) >= 3:
                m = statistics.median(g)
                rest = sorted(g)
                if len(g) % 2:
                    rest.pop(len(g) // 2)
                out += [v - m for v in rest]
    return tuple(out)


def sign_test(model: LinkModel, link: SimLink) -> MedianSearch:
    return MedianSearch(link, target=model.target, hi_packets=model.hi_packets, samples=5,
                        first_guess_packets=model.first_guess, assume_hi_passes=True, resolution=0.05,
                        sequential=True, max_samples=20)  # fmt: skip


def precision(model: LinkModel, link: SimLink, share: float = 0.1) -> MedianSearch:
    return MedianSearch(link, target=model.target, hi_packets=model.hi_packets, samples=3,
                        first_guess_packets=model.first_guess, assume_hi_passes=True,
                        precision=share, level=0.9)  # fmt: skip


def quick_precision(model: LinkModel, link: SimLink) -> MedianSearch:
    return precision(model, link, share=0.2)


RULES = {"sign test (presets)": sign_test, "precision 0.1": precision, "precision 0.2 (quick)": quick_precision}


def med_range(xs: list[float], fmt: str = "{:.0f}") -> str:
    return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}..{fmt.format(max(xs))}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--noise", choices=("model", "committed"), default="model")
    ap.add_argument(
        "--noise-estimate",
        choices=("trimmed", "rms"),
        default="trimmed",
        help="the precision rule's estimate of one sample's noise (rms: the one before 2026-11-26 late)",
    )
    ap.add_argument("--rules", default=",".join(RULES), help=f"comma-separated, from {', '.join(RULES)}")
    ap.add_argument(
        "--guess",
        type=float,
        default=0.0,
        help="first probe at this multiple of the true crossing (0: the model's, RTT*C/sqrt(N), above it); "
        "the quick and full presets' guesses (a cc rule, the sweep's last answer scaled) fall on either side",
    )
    ap.add_argument("--window", type=float, default=crossing.WINDOW,
                    help=f"the fit's window around the estimate (crossing.WINDOW, {crossing.WINDOW})")  # fmt: skip
    a = ap.parse_args()
    crossing.WINDOW = a.window
    crossing.NOISE_ESTIMATE = crossing.robust_sd if a.noise_estimate == "trimmed" else crossing.rms_sd
    rules = {k: RULES[k] for k in a.rules.split(",")}
    models = dict(MODELS)
    if a.noise == "committed":
        models = {k: replace(m, residuals=committed_residuals(FLOWS[k])) for k, m in MODELS.items() if k != "flat"}
    if a.guess > 0:
        models = {k: replace(m, first_guess=max(1, round(a.guess * m.crossing))) for k, m in models.items()}
    t0 = time.monotonic()
    print("| model | rule | answer (true) | CV | interval holds the truth | converged | samples | settles | "
          "predicted wall per search (s) |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, model in models.items():
        timing = auto_timing("cubic", FLOWS[name], 62.5, 87.0, model.crossing * FRAME_BYTES)
        for rule, make in rules.items():
            answers, samples, settles, walls, covered, converged = [], [], [], [], 0, 0
            for seed in range(a.seeds):
                link = SimLink(model, seed)
                res = make(model, link).run()
                answers.append(res.buffer_packets)
                samples.append(link.samples)
                settles.append(link.settles)
                walls.append(link.samples * timing.sample_s + link.settles * timing.settle_s)
                lo, hi = res.uncertain_interval_packets or (0, 0)
                covered += lo <= model.crossing <= hi
                converged += res.converged
            cv = statistics.pstdev(answers) / statistics.fmean(answers)
            print(f"| {name} | {rule} | {med_range(answers)} ({SimLink(model).answer()}) | {cv:.3f} | "
                  f"{covered}/{a.seeds} | {converged}/{a.seeds} | {med_range(samples)} | {med_range(settles)} | "
                  f"{med_range(walls)} |")  # fmt: skip
    print(f"\n{a.seeds} seeds per model and rule; {time.monotonic() - t0:.1f} s of CPU.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
