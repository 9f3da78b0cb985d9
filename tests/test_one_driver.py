"""Each long-flow experiment is written once: search and measure drive whichever link they are given
(scaffold/runs.py) and never ask which one it is, so a difference between the emulated link and the
twin is TCP's or the emulator's, not the driver's."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DRIVERS = ["buffersizing/longlived/search.py", "buffersizing/longlived/measure.py"]
# What only one link has: naming any of these in a driver is a branch on the link.
ONE_LINK = {"Experiment", "TwinRun", "EmulatedLink", "SimulatedLink", "FreshLink", "Dumbbell", "SimDumbbell",
            "DumbbellConfig", "SimConfig", "Emulated", "Simulated"}  # fmt: skip


def names_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    found |= {a.name.split(".")[-1] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    return found


def test_the_drivers_name_no_single_link():
    for rel in DRIVERS:
        named = names_in(REPO / rel) & ONE_LINK
        assert not named, f"{rel} names {sorted(named)}: an experiment must not know which link it has"


def test_isinstance_on_a_link_is_caught():
    """The check above sees a branch on the link (the test can fail)."""
    src = "from bufsize.scaffold.twin import TwinRun\ndef f(run):\n    return isinstance(run, TwinRun)\n"
    tree_names = {n.id for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Name)}
    assert "TwinRun" in tree_names & ONE_LINK


def test_both_links_offer_every_verb_a_driver_uses():
    """The emulated run and the twin's run have every verb and attribute of LinkRun, so a driver
    written against one runs on the other. Building either run starts nothing."""
    from bufsize.scaffold.runs import Emulated, LinkRun, Simulated
    from bufsize.topologies.config import DumbbellConfig
    from bufsize.topologies.nssim import SimConfig

    link = {"hosts": 2, "rate_mbps": 10.0, "rtt_ms": [20.0, 20.0], "cc": "reno"}
    runs = [Emulated("delayline").run(DumbbellConfig(**link), "search", 30_000),
            Simulated().run(SimConfig(**link, seed=1), "search", 30_000, 5)]  # fmt: skip
    verbs = {k for k in vars(LinkRun) if not k.startswith("_")} | set(LinkRun.__annotations__)
    assert {"open_link", "warm_up", "finish", "cfg"} <= verbs
    for run in runs:
        assert not [v for v in verbs if not hasattr(run, v)], type(run).__name__
