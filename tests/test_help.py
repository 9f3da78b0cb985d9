"""Help that explains itself: every command's --help ends with an example that parses and the exit
statuses; `plot --out` draws elsewhere and never rewrites the committed results unasked; a sweep's
--dry-run needs no --out."""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import subprocess
from pathlib import Path

import pytest
from conftest import BUFSIZE

from bufsize.cli import build_parser
from bufsize.cli.helptext import EXAMPLES

REPO = Path(__file__).resolve().parents[1]


def commands(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                key = f"{prefix} {name}".strip()
                found[key] = sub
                found |= commands(sub, key)
    return found


ALL = commands(build_parser())


def test_every_command_has_one_example_and_no_example_is_stale():
    assert set(EXAMPLES) == set(ALL)


@pytest.mark.parametrize("name", sorted(ALL))
def test_help_ends_with_its_example_and_the_exit_statuses(name):
    text = ALL[name].format_help()
    assert f"example:\n  {EXAMPLES[name]}" in text
    assert "exit status: 0 done" in text and "2 refused" in text and "3 the run finished" in text
    argv = shlex.split(EXAMPLES[name])
    assert argv[0] == "bufsize"
    if name not in ("course", "sim"):  # a group's example is one of its commands'
        assert argv[1 : 1 + len(name.split())] == name.split()
    args = build_parser().parse_args(argv[1:])  # the example is a command line the parser takes
    assert callable(args.func)


@pytest.mark.parametrize("name", ["search", "sweep", "measure", "sim search", "sim sweep"])
def test_the_options_of_an_experiment_are_listed_by_group(name):
    """The long option lists come in groups (the link, the search, output, ...), each under its title,
    with every option of a group below it and none left loose but help and a command's own few."""
    p = ALL[name]
    titles = [
        g.title for g in p._action_groups if g._group_actions and g.title not in ("options", "positional arguments")
    ]
    assert {"the link", "output"} <= set(titles) and len(titles) >= 3, titles
    text = p.format_help()
    for g in p._action_groups:
        if g.title in titles:
            at = text.index(f"\n{g.title}:\n")
            for action in g._group_actions:
                assert text.index(action.option_strings[-1], at) > at, (g.title, action.option_strings)
    loose = [a for a in p._action_groups if a.title == "options"][0]._group_actions
    assert len(loose) <= 4, [a.option_strings for a in loose]


def committed(family: str) -> Path:
    """The newest committed sweep of a family (its results, table and figure)."""
    return sorted(t.parent for t in (REPO / "results" / family).glob("*/table.md") if not t.parent.is_symlink())[-1]


def digest(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir()) if p.is_file()}


def test_plot_out_draws_elsewhere_and_the_committed_results_stay_as_they_are(tmp_path):
    sweep = committed("full")  # any committed sweep: the protection is of the results/ tree
    before = digest(sweep)
    refused = subprocess.run([BUFSIZE, "plot", str(sweep)], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--out" in refused.stderr and "--force" in refused.stderr
    out = tmp_path / "figures"
    res = subprocess.run([BUFSIZE, "plot", str(sweep), "--out", str(out), "--json"], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr
    wrote = {Path(p).name for p in json.loads(res.stdout)["wrote"]}
    assert wrote == {"figure.png", "figure.pdf", "table.csv", "table.md", "curves.png", "curves.csv"}
    assert all(Path(p).parent == out for p in json.loads(res.stdout)["wrote"])
    assert (out / "table.md").read_bytes() == (sweep / "table.md").read_bytes()  # the same table, elsewhere
    assert digest(sweep) == before


def test_a_user_sweep_is_redrawn_in_place_without_asking(tmp_path):
    mine = tmp_path / "mine"
    subprocess.run(["cp", "-r", str(committed("quick")), str(mine)], check=True)
    (mine / "table.md").unlink()
    res = subprocess.run([BUFSIZE, "plot", str(mine)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert (mine / "table.md").exists()


def test_a_sweep_dry_run_needs_no_out():
    res = subprocess.run([BUFSIZE, "sweep", "--preset", "quick", "--dry-run", "--json"], capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert plan["out"] is None and all(not p["finished"] for p in plan["points"])
    assert plan["points"][0]["dir"].startswith("OUT/")
