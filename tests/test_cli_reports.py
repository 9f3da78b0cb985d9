"""What commands report: --version, --json on the commands that report, and --dry-run plans that
build, create and contact nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from conftest import bufsize, spec_of

from bufsize import __version__
from bufsize.longlived.presets import QUICK_FLOWS
from bufsize.scaffold.resultdir import write_json_atomic

REPO = Path(__file__).resolve().parents[1]


def test_version():
    res = bufsize("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"bufsize {__version__}"


def test_sweep_dry_run_plans_every_point_and_creates_nothing(tmp_path):
    out = tmp_path / "sweep"
    res = bufsize("sweep", "--preset", "quick", "--out", str(out), "--dry-run", "--json")
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert [(p["flows"], p["run"]) for p in plan["points"]] == [(10, 1), (50, 1), (200, 1), (800, 1)]
    assert plan["pending_points"] == 4 and plan["estimate_s"] == sum(p["estimate_s"] for p in plan["points"]) > 0
    assert plan["shaper"] == "line" and not out.exists()
    text = bufsize("sweep", "--preset", "quick", "--out", str(out), "--dry-run")
    assert text.returncode == 0 and "4 of 4 points to run" in text.stdout and not out.exists()


def test_sweep_dry_run_skips_finished_points_and_refuses_another_sweeps_directory(tmp_path):
    out = tmp_path / "sweep"
    spec = spec_of("--preset", "quick")
    (out / "n0010-run1").mkdir(parents=True)
    write_json_atomic(out / "manifest.json", {"spec": spec.to_dict(), "machine": {}})
    write_json_atomic(out / "n0010-run1" / "result.json", {"flows": 10, "buffer_packets": 50})
    plan = json.loads(bufsize("sweep", "--preset", "quick", "--out", str(out), "--dry-run", "--json").stdout)
    done = [p for p in plan["points"] if p["finished"]]
    assert [(p["flows"], p["run"]) for p in done] == [(10, 1)] and plan["pending_points"] == 3
    assert plan["estimate_s"] == sum(p["estimate_s"] for p in plan["points"] if not p["finished"])
    more = bufsize("sweep", "--preset", "quick", "--runs", "2", "--out", str(out), "--dry-run", "--json")
    assert more.returncode == 0, more.stderr  # more runs of the same sweep: planned on top of the finished one
    assert json.loads(more.stdout)["pending_points"] == 7
    other = bufsize("sweep", "--preset", "quick", "--rate-mbps", "100", "--out", str(out), "--dry-run")
    assert other.returncode == 2 and "different settings" in other.stderr


def test_quick_dry_run_names_its_directory_and_creates_nothing(tmp_path):
    base = tmp_path / "quick"
    res = bufsize("quick", "--out", str(base), "--dry-run", "--json")
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert plan["resume"] is False and Path(plan["out"]).parent == base
    assert len(plan["sweep"]["points"]) == len(QUICK_FLOWS) and plan["estimate_s"] > plan["sweep"]["estimate_s"]
    assert not base.exists()


def test_quick_plan_quotes_the_wall_times_of_earlier_runs_of_its_own_settings(tmp_path):
    """Only finished runs of the quick preset as it is now count: not a run of other settings, not one
    cut short, not `latest` (a link), not a run whose wall time does not parse."""
    from bufsize.longlived.quick import earlier_minutes, plan_quick, quick_spec
    from bufsize.longlived.sweep import point_dir

    spec = quick_spec()
    base = tmp_path / "quick"

    def run(name: str, spec_dict: dict, points: list, wall: str | None) -> None:
        d = base / name
        d.mkdir(parents=True)
        (d / "manifest.json").write_text(json.dumps({"spec": spec_dict}))
        for n, r in points:
            point_dir(d, n, r).mkdir()
            (point_dir(d, n, r) / "result.json").write_text(json.dumps({"flows": n, "buffer_packets": 9}))
        if wall is not None:
            (d / "wall_seconds.txt").write_text(wall)

    assert earlier_minutes(base, spec) == []  # no directory yet
    run("a", spec.to_dict(), spec.points(), "573\n")
    run("b", spec.to_dict(), spec.points(), "526\n")
    run("old-preset", spec.to_dict() | {"flows": [2, *spec.flows]}, spec.points(), "840\n")
    run("cut-short", spec.to_dict(), spec.points()[:1], "100\n")
    run("no-wall", spec.to_dict(), spec.points(), "nine minutes\n")
    (base / "latest").symlink_to("a")
    assert [round(m, 2) for m in earlier_minutes(base, spec)] == [9.55, 8.77]
    assert "its 2 finished runs in " in plan_quick(base)["text"] and "took 8.8 to 9.6 min" in plan_quick(base)["text"]
    assert "finished run" not in plan_quick(tmp_path / "empty")["text"]
    # A user's runs go elsewhere than the committed ones, whose times the plan quotes too.
    assert f"its 2 finished runs in {base}/ took" in plan_quick(tmp_path / "mine", reference=base)["text"]


def test_remote_dry_run_assigns_every_point_once_and_contacts_nothing(tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text("")
    argv = ["remote", "--machine", "root@192.0.2.1,root@192.0.2.2", "--preset", "quick", "--runs", "2", "--out",
            str(tmp_path / "merged"), "--known-hosts", str(known), "--commit", "HEAD", "--dry-run"]  # fmt: skip
    res = bufsize(*argv, "--json", timeout=60)
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    shares = [s["points"].split(", ") for s in plan["machines"].values()]
    assert len(shares) == 2 and all(shares)
    assert sorted(p for share in shares for p in share) == sorted(f"N={n} run {r}" for n in QUICK_FLOWS for r in (1, 2))
    assert plan["estimate_s"] == max(s["estimate_s"] for s in plan["machines"].values()) > 0
    assert not (tmp_path / "merged").exists()


def test_plot_json_lists_the_files_it_wrote(tmp_path):
    src = REPO / "results" / "full" / "2026-11-25"
    d = tmp_path / "sweep"
    d.mkdir()
    shutil.copy(src / "manifest.json", d)
    for r in sorted(src.glob("n*/result.json"))[:6]:
        (d / r.parent.name).mkdir()
        shutil.copy(r, d / r.parent.name)
    res = bufsize("plot", str(d), "--json")
    assert res.returncode == 0, res.stderr
    wrote = [Path(p) for p in json.loads(res.stdout)["wrote"]]
    assert wrote and all(p.exists() and p.parent == d for p in wrote)
    assert {"figure.png", "table.csv"} <= {p.name for p in wrote}


def test_clean_json_names_what_it_removed(root):
    """A toolkit-named namespace that no run's ledger names and nobody is in (what a run killed before
    it wrote its ledger leaves) is removed, and `--json` names it under "removed"."""
    name = f"bsz-cj{os.getpid():x}-h1"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        res = bufsize("clean", "--json")
        assert res.returncode in (0, 1), res.stderr
        out = json.loads(res.stdout)
        assert set(out) == {"removed", "refused"} and all(isinstance(v, list) for v in out.values())
        assert f"namespace {name}" in out["removed"], out
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
        assert name not in listed.split()
    finally:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)  # only if the test failed first


def test_the_main_job_writes_where_git_does_not_look():
    """`./setup.sh quick` runs `bufsize quick` with its default --out: a user's first run must leave
    `git status` clean, so the default lies in a folder .gitignore names, and no tracked file is in it."""
    from bufsize.cli import build_parser

    out = Path(build_parser().parse_args(["quick"]).out)
    probe = out / "2030-01-01-000000" / "n0010-run1" / "result.json"
    ignored = subprocess.run(["git", "check-ignore", "-q", str(probe)], cwd=REPO)
    assert ignored.returncode == 0, f"{probe} would be a file git sees"
    tracked = subprocess.run(["git", "ls-files", str(out)], cwd=REPO, capture_output=True, text=True)
    assert tracked.stdout == ""
