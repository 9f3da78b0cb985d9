"""`bufsize plot`: redraw a result's figures from its files, whichever experiment wrote them."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from bufsize.longlived.report import make_report
from bufsize.monitors.plots import plot_run
from bufsize.scaffold.projectfiles import COMMITTED_RESULTS_DIR, FIDELITY_2012, LOCAL_RUNS_DIR
from bufsize.scaffold.resultdir import check_out_dir, read_finished
from bufsize.shortflows.plots import plot_shortflows
from bufsize.topologies.errors import UsageError


def plot_dir(
    given: str | Path,
    title: str | None = None,
    with_sim: str | Path | None = None,
    beside: Sequence[str | Path] = (),
    out: str | Path | None = None,
    in_place: bool = True,
    curve_flows: Sequence[int] | None = None,
) -> list[Path]:
    """`bufsize plot`: a sweep's figure and table, or one run's monitor plots redrawn from its CSVs, into
    `out` (default: the directory itself). The committed results are redrawn in place only with
    `in_place`: a user's plot must not rewrite a tracked file."""
    if not str(given).strip():  # Path("") would be the current directory
        raise UsageError(f"dir '{given}': empty; give a sweep or run directory")
    d = Path(given)
    if not d.is_dir():
        raise UsageError(f"dir {d}: not a directory")
    sim = Path(with_sim) if with_sim is not None else None
    if sim is not None and (not str(with_sim).strip() or not sim.is_dir()):
        raise UsageError(f"--with-sim {with_sim}: not a directory")
    for b in beside:
        if not str(b).strip() or not Path(b).is_dir():
            raise UsageError(f"--beside {b}: not a directory")
    if out is None and not in_place and is_committed(d):
        raise UsageError(
            f"{d} holds committed results: give --out DIR for the figures and tables, or --force to redraw them"
            " in place"
        )
    dest = check_out_dir(out) if out is not None else None
    try:
        return _plot_dir(d, title, sim, [Path(b) for b in beside], dest, curve_flows)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, ZeroDivisionError, OverflowError,
            csv.Error) as e:  # fmt: skip
        # The files are the user's (or another version's): what they hold is reported, not a traceback.
        detail = " ".join(str(e).split())[:200]
        raise UsageError(f"{d}: cannot plot what it holds ({type(e).__name__}: {detail})") from e
    except RecursionError as e:
        raise UsageError(f"{d}: cannot plot what it holds (nested too deeply)") from e


def is_committed(d: Path) -> bool:
    """Whether `d` is inside the checkout's committed results (not a user's runs under results/local/)."""
    here = d.resolve()
    local = (COMMITTED_RESULTS_DIR / LOCAL_RUNS_DIR.relative_to("results")).resolve()
    return here.is_relative_to(COMMITTED_RESULTS_DIR.resolve()) and not here.is_relative_to(local)


def _plot_dir(
    d: Path,
    title: str | None,
    with_sim: Path | None = None,
    beside: Sequence[Path] = (),
    dest: Path | None = None,
    curve_flows: Sequence[int] | None = None,
) -> list[Path]:
    if (d / "result.json").exists():
        if with_sim is not None or beside:
            raise UsageError("--with-sim and --beside go with a sweep directory, not one run's")
        if read_finished(d / "result.json") is None:
            raise UsageError(f"{d}/result.json: not a JSON object (truncated, or not a result)")
        paths = plot_run(d, title, fidelity_2012=FIDELITY_2012, dest=dest)
        if (d / "transfers.csv").exists():  # a `bufsize shortflows` run
            paths += plot_shortflows(d, dest)
        if not paths:
            raise UsageError(f"{d}: no monitor data (queue.csv, rate.csv, ...) to plot")
        return paths
    return make_report(d, title, with_sim, beside, dest, curve_flows)
