"""The documentation site: built in strict mode with its link checks, and its generated pages current.

`mkdocs build --strict` fails on any warning: a page not in the nav, a link to a page or an anchor
that does not exist, and (docs/hooks/site.py) a link that leaves the repository, names a file the
repository lacks, or text that names a document outside the repository. The command reference is
generated from the parser at build time; the Results page by `bufsize report`, checked here.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bufsize.longlived.resultspage import row
from bufsize.topologies import FRAME_BYTES

REPO = Path(__file__).resolve().parents[1]
MKDOCS = [sys.executable, "-m", "mkdocs", "build", "--strict"]
BUFSIZE = str(Path(sys.executable).parent / "bufsize")


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*MKDOCS, "-f", str(config), "-d", str(site)], capture_output=True, text=True, timeout=300)


def test_the_site_builds_with_no_warning(tmp_path):
    res = build(REPO / "mkdocs.yml", tmp_path / "site")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "WARNING" not in res.stderr, res.stderr[-3000:]
    site = tmp_path / "site"
    # The command reference has every command's help, example and exit statuses.
    reference = (site / "reference" / "index.html").read_text()
    for command in ("bufsize search", "bufsize sweep", "bufsize sim search", "bufsize report", "bufsize course check"):
        assert "<h2 id=" in reference and command in reference, command
    assert reference.count("exit status: 0 done") >= 20
    # The Results page shows the committed figures, copied into the site.
    results = (site / "results" / "index.html").read_text()
    assert 'src="../repo/results/full/' in results
    assert list((site / "repo" / "results" / "full").glob("*/figure.png"))


def test_a_broken_link_a_link_outside_and_an_outside_document_fail_the_build(tmp_path):
    """A small site with the real hook: each planted problem is named, and a good link to a file of the
    repository becomes its path, an image of it a copy in the site."""
    (tmp_path / "docs" / "hooks").mkdir(parents=True)
    shutil.copy(REPO / "docs" / "hooks" / "site.py", tmp_path / "docs" / "hooks" / "site.py")
    (tmp_path / "present.txt").write_text("here\n")
    shutil.copy(next((REPO / "results" / "full").glob("*/figure.png")), tmp_path / "fig.png")  # any committed figure
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: t\ndocs_dir: docs\nexclude_docs: |\n  hooks/\nhooks:\n  - docs/hooks/site.py\n"
        "validation:\n  links:\n    not_found: warn\n    anchors: warn\n"
        "nav:\n  - index.md\n  - commands.md\n  - reference.md\n"
    )
    (tmp_path / "docs" / "commands.md").write_text("# Commands\n")
    good = "A [note](../present.txt) and ![a figure](../fig.png).\n"
    (tmp_path / "docs" / "index.md").write_text(f"# T\n\n{good}")
    ok = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert ok.returncode == 0 and "WARNING" not in ok.stderr, ok.stderr
    page = (tmp_path / "site" / "index.html").read_text()
    assert "<code>present.txt</code>" in page and 'src="repo/fig.png"' in page
    assert (tmp_path / "site" / "repo" / "fig.png").read_bytes() == (tmp_path / "fig.png").read_bytes()

    planted = {
        "[gone](../absent.md)": "the repository has no absent.md",
        "[passwd](../../../../../../etc/passwd)": "leaves the repository",
        "as seed 000 shows": "'seed 000' names a document outside the repository",
        "[anchor](#no-such-heading)": "no-such-heading",
    }
    (tmp_path / "docs" / "index.md").write_text("# T\n\n" + good + "\n".join(planted) + "\n")
    bad = build(tmp_path / "mkdocs.yml", tmp_path / "site2")
    assert bad.returncode != 0
    for what in planted.values():
        assert what in bad.stderr, (what, bad.stderr)


def test_the_results_page_is_the_one_the_committed_results_give(tmp_path):
    res = subprocess.run([BUFSIZE, "report", "--check"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 0, res.stderr
    stale = tmp_path / "results.md"
    stale.write_text((REPO / "docs" / "results.md").read_text().replace("| 10 |", "| 11 |", 1))
    res = subprocess.run([BUFSIZE, "report", "--check", "--out", str(stale)], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert res.returncode == 1 and "not what the committed results give" in res.stderr, res.stderr


def run(n: int, packets: int, valid: bool, interval: tuple[int, int], failed: str = "converged") -> dict:
    return {
        "flows": n,
        "buffer_packets": packets,
        "buffer_bytes": packets * FRAME_BYTES,
        "valid": valid,
        "flags": {"converged": valid or failed != "converged", "pacing_fidelity_ok": valid or failed == "converged"},
        "uncertain_interval_packets": list(interval),
        "theory_sqrt_n_packets": 40.0,
    }


@pytest.mark.parametrize(
    ("runs", "expected"),
    [
        # A flagged run's 90 is neither in the median nor in the interval or the range.
        (
            [run(10, 20, True, (18, 24)), run(10, 30, True, (25, 33)), run(10, 90, False, (80, 99))],
            "| 10 | 25 | 18..33 | 3 (2) | 20..30 | 40 | 0.62 | converged (1) |",
        ),
        (
            [run(10, 20, False, (18, 24), "pacing_fidelity_ok")],
            "| 10 | - | - | 1 (0) | - | 40 | - | pacing_fidelity_ok (1) |",
        ),
    ],
)
def test_a_results_row_is_the_valid_runs_answer_and_names_each_flag(runs, expected):
    assert row(10, runs) == expected


def test_the_readme_times_are_the_medians_of_the_timing_benchmark():
    """README's "about N minutes" for the two commands is the median of the passing fresh-clone runs in
    bench/command_times.py's summary with nothing beside the run (the Results page shows the same, with
    the range); a new passing run moves it, a failed run or one under a planted load does not."""
    from bufsize.longlived.resultspage import TIMINGS, command_minutes, recorded_minutes

    text = " ".join((REPO / "README.md").read_text().split())
    m = re.search(r"the main job took about (\d+) minutes with its set-up and the test command about (\d+)", text)
    assert m, "README should say how long the two commands take"
    times = recorded_minutes(REPO)
    assert (int(m.group(1)), int(m.group(2))) == (times["./setup.sh quick"][0], times["./setup.sh test"][0])

    runs = json.loads((REPO / TIMINGS).read_text())["runs"]
    failed = {"command": "./setup.sh test", "seconds": 9000, "exit": 1}
    assert command_minutes([*runs, failed]) == times
    slow = [{"command": "./setup.sh test", "load": "none", "seconds": 3000, "exit": 0}] * (2 * len(runs) + 1)
    assert command_minutes(runs + slow)["./setup.sh test"][0] == 50
    loaded = [{**r, "load": "a process busy 30% of one core"} for r in slow]
    assert command_minutes(runs + loaded) == times
