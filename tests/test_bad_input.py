"""Bad values for every option of every command: refused with status 2 in one line naming the option,
before anything is created.

The matrix is generated from the parser itself, so a new option is covered the day it is added:
every option that takes a value gets NaN, infinities, zero, negative, huge, tiny, empty and
non-ASCII values (and list options malformed lists). Most cases run `cli.main` in this process with
`require_root` replaced by a tripwire: validation must be complete before it, so a value that gets
through fails the test at once instead of building a dumbbell. A sample of the matrix, the issue's
known cases, `--out` and `./binary_search.py` run the real command as root, and those also check
that no namespace, ledger file or `--out` directory appeared.
"""

from __future__ import annotations

import argparse
import os
import sys
import zlib
from pathlib import Path

import pytest
from conftest import BUFSIZE, Isolated, isolated

from bufsize import cli
from bufsize.cli import commands, shell
from bufsize.cli import shortflows as shortflow_cli
from bufsize.topologies.ledger import live_runs

REPO = Path(__file__).resolve().parents[1]
OUT = "<out>"  # replaced by a fresh path under tmp_path that must not exist afterwards
TIMEOUT_S = 20  # a refusal takes well under a second; a case that starts a run is stopped at this

VALUES = ["nan", "inf", "-inf", "0", "-1", "1e308", "9" * 30, "1e-9", "", "ÿ€"]

# Malformed lists, for the options that take them (on top of VALUES).
LISTS = {
    "--flows": [",", "1,,2", "2,", "2;10", "2 10", "2..10", "2,x", "2,2", "2,-1", "nan,2", "2,1e308", "2,0"],
    "--multiples": [",", "1,,2", "1;2", "1,x", "nan,1", "1,inf", "1,-2", "0,1", "1,1", "1,1e308", "1e-9,1"],
    "--rtt-ms": ["1,,2", "20,40,60", "300..20", "1..", "..2", "1..2..3", "nan..5", "5..inf", "-1..5", "20;40"],
}
LIST_OPTIONS = {("sweep", "--flows"), ("remote", "--flows"), ("util-table", "--flows"), ("util-table", "--multiples"),
                ("sim sweep", "--flows"), ("sim util-table", "--flows"), ("sim util-table", "--multiples")}  # fmt: skip
MODEL_LISTS = {
    "--rtt-ms": [",", "1,,2", "nan,5", "0,5", "-1,5", "5,inf", "5;6"],
    "--buffer-packets": [",", "1,,2", "x,1", "nan", "1,inf", "-1,2", "1;2"],
}

# A valid command line for each command; the option under test is appended (the last value wins).
BASE = {
    "verify": ["--out", OUT],
    "flows": [],
    "search": ["--out", OUT],
    "sweep": ["--out", OUT, "--flows", "2"],
    "measure": ["--buffer-packets", "10", "--out", OUT],
    "util-table": ["--out", OUT],
    "model": ["--flows", "10"],
    "shell": [],
    # --known-hosts: any readable file passes validation (its keys are read when connecting).
    "remote": ["--out", OUT, "--flows", "2", "--machine", "192.0.2.1", "--known-hosts", __file__, "--commit", "HEAD"],
    "shortflows": ["--buffer-packets", "10", "--load", "0.5", "--transfers", "5", "--out", OUT],
    "shortexp": ["loss", "--out", OUT],
    # The ns-3 twin's commands (a second level of subcommands: the key is the command line's start).
    "sim search": ["--out", OUT],
    "sim measure": ["--buffer-packets", "10", "--out", OUT],
    "sim sweep": ["--out", OUT, "--flows", "2"],
    "sim util-table": ["--out", OUT],
    "sim shortexp": ["loss", "--out", OUT],
}
SHORTFLOWS_VALID = {
    "--access-mbps": {"0"}, "--rtt-ms": {"0"}, "--fidelity-s": {"0"},
    "--flows": {"0"},  # no long flows beside the short ones
    "--users": {"0"},  # the base's open loop is enough
    "--load": {"1e-9"},  # any offered load from none up
    "--seed": {"0"},
    "--think-s": {"0", "1e-9"}, "--warmup-s": {"0", "1e-9"}, "--long-warmup-s": {"0", "1e-9"},
}  # fmt: skip
# Any text is a valid plot title; --out is any path and has its own cases below.
NOT_IN_MATRIX = {"--title", "--out"}

# Values that are valid for an option: the test must not demand refusing them (each is checked to be
# accepted in test_valid_edge_values_pass_validation).
VALID: dict[tuple[str, str], set[str]] = {
    # 0 leaves the access links unshaped.
    **{(c, "--access-mbps"): {"0"} for c in ("verify", "flows", "search", "sweep", "measure", "util-table", "shell")},
    ("remote", "--access-mbps"): {"0"},
    **{(c, "--fidelity-s"): {"0"} for c in ("search", "sweep", "remote", "measure", "util-table")},  # 0 skips the trace
    # 0 skips the reference
    **{(c, "--reference-s"): {"0"} for c in ("measure", "util-table", "sim measure", "sim util-table")},
    # measure may sample right after a buffer change; search only asks for a positive settle time.
    **{(c, "--settle-s"): {"0", "1e-9"} for c in ("measure", "util-table", "sim util-table")},
    # measured at once
    **{(c, "--warmup-s"): {"0", "1e-9"} for c in ("measure", "util-table", "sim measure", "sim util-table")},
    **{(c, "--settle-s"): {"1e-9"} for c in ("search", "sweep", "remote")},
    # 0 means: stop when the bracket is one packet wide.
    **{(c, "--resolution"): {"0", "1e-9"} for c in ("search", "sweep", "remote")},
    # verify, flows and shell build a dumbbell: no added delay is a valid one. (search, sweep,
    # measure and util-table refuse RTT 0: their calibration or reference buffer is 2 BDP = 0.)
    **{(c, "--rtt-ms"): {"0"} for c in ("verify", "flows", "shell")},
    **{(c, "--max-samples"): {"0"} for c in ("search", "sweep", "remote")},  # 0: a fixed count per probe
    **{(c, "--precision"): {"0"} for c in ("search", "sweep", "remote")},  # 0: the precision rule is off
    # 0 counts every sample; any limit above it retakes the samples stolen past it.
    **{(c, "--max-sample-steal"): {"0", "1e-9"} for c in ("search", "sweep", "remote")},
    # Syntactically valid host names (whether they resolve is found out when connecting).
    ("remote", "--machine"): {"nan", "inf", "0", "1e308", "9" * 30, "1e-9"},
    ("model", "--buffer-packets"): {"0", "1e-9"},  # the fluid model takes any buffer from none up
    ("model", "--load"): {"1e-9"},  # any load strictly between 0 and 1
    **{("shortflows", opt): vals for opt, vals in SHORTFLOWS_VALID.items()},
    # The twin takes the emulated search's options with the same meaning.
    **{("sim " + c, "--fidelity-s"): {"0"} for c in ("search", "sweep")},
    **{("sim " + c, "--settle-s"): {"1e-9"} for c in ("search", "sweep")},
    **{("sim " + c, "--resolution"): {"0", "1e-9"} for c in ("search", "sweep")},
    **{("sim " + c, "--max-samples"): {"0"} for c in ("search", "sweep")},
    **{("sim " + c, "--precision"): {"0"} for c in ("search", "sweep")},
    # 0: every long flow starts at the same simulated instant.
    **{("sim " + c, "--start-spread-s"): {"0", "1e-9"} for c in ("search", "measure", "sweep", "util-table")},
    # A measurement may start right after the buffer changes (a path of no delay needs --reference-s 0,
    # as the emulated measure: its reference buffer of 2 BDP would be empty).
    ("sim measure", "--settle-s"): {"0", "1e-9"},
}


def subparsers() -> dict[str, argparse.ArgumentParser]:
    """Every command, the twin's as 'sim search', 'sim measure', 'sim sweep', 'sim shortexp'."""

    def level(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        return dict(next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices)

    top = level(cli.build_parser())
    return {k: v for k, v in top.items() if k != "sim"} | {f"sim {k}": v for k, v in level(top["sim"]).items()}


def value_options(p: argparse.ArgumentParser) -> list[str]:
    """The long name of every option that takes a value."""
    return [a.option_strings[-1] for a in p._actions if a.option_strings and a.nargs != 0 and a.dest != "help"]


def matrix() -> list[tuple[list[str], str]]:
    """(argv, what the one line must name) for every bad value of every option of every command."""
    cases: list[tuple[list[str], str]] = []
    for cmd, p in subparsers().items():
        if cmd in BASE:
            for opt in value_options(p):
                if opt in NOT_IN_MATRIX:
                    continue
                extra = MODEL_LISTS.get(opt, []) if cmd == "model" else []
                if (cmd, opt) in LIST_OPTIONS or (opt == "--rtt-ms" and cmd != "model"):
                    extra = LISTS[opt]
                base = BASE[cmd]
                if opt in ("--buffer-bytes", "--buffer-packets") and cmd in ("measure", "shortflows"):
                    base = [a for a in base if a not in ("--buffer-packets", "10")]  # the option under test is it
                for v in VALUES + extra:
                    if v not in VALID.get((cmd, opt), set()):
                        cases.append(([*cmd.split(), *base, f"{opt}={v}"], opt))  # '=': '-inf' must not read as a flag
        elif cmd == "plot":
            cases += [(["plot", "--", v], "dir") for v in VALUES]
        elif cmd == "validate":  # a path that is not there is refused by name
            cases += [(["validate", "--", v], "validate") for v in VALUES]
        elif cmd == "course":  # check reads a directory given as a path: no answers.json there is refused
            cases += [(["course", "check", "--", v], "answers.json" if v else "empty path") for v in VALUES]
            cases += [(["course", "--", v], "invalid choice") for v in VALUES]
        else:  # doctor, clean, quick: nothing here takes a number; a stray value is refused by the parser
            cases += [([cmd, "--", v], "unrecognized arguments") for v in VALUES]
    return cases


MATRIX = matrix()


def case_id(case: tuple[list[str], str]) -> str:
    return " ".join(a.replace(OUT, "OUT") for a in case[0]).encode("ascii", "backslashreplace").decode()


def with_out(argv: list[str], out: Path) -> list[str]:
    return [str(out) if a == OUT else a for a in argv]


def assert_no_run_here() -> None:
    """No run ledgered by this process: the tripwire stops the command past validation, and this says
    nothing before it got as far as a ledger either (the toolkit ledgers a namespace before making it).
    Runs of other processes, the tests that build beside this one, are theirs."""
    mine = [s.path.name for s in live_runs() if s.owner_pid == os.getpid()]
    assert not mine, f"this process ledgered runs {mine}"


def check_refusal(code: int | None, err: str, needle: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2, err
    assert "Traceback" not in err, err
    assert len(lines) == 1, err
    assert needle in lines[0], err


class ReachedRoot(Exception):
    """Validation let the value through: the command went on to the work that needs root."""


@pytest.fixture
def in_process(monkeypatch, tmp_path, capsys):
    """Run `cli.main` here; anything past validation trips ReachedRoot before touching the machine."""

    def tripwire(*_args: object, **_kw: object) -> None:
        raise ReachedRoot

    monkeypatch.setattr(commands, "require_root", tripwire)
    monkeypatch.setattr(commands, "delay_backend", tripwire)
    monkeypatch.setattr(shell, "require_root", tripwire)
    monkeypatch.setattr(shortflow_cli, "require_root", tripwire)
    monkeypatch.setattr("bufsize.remote.run.check_out_dir", tripwire)  # remote: past validation, commit included
    monkeypatch.setattr("bufsize.topologies.config.delay_backend", tripwire)  # DumbbellConfig.backend()
    monkeypatch.setattr("bufsize.topologies.machine.qdisc_support", tripwire)
    monkeypatch.setattr("bufsize.longlived.measure.run_measure", tripwire)  # the twin: past validation, it simulates
    monkeypatch.setattr("bufsize.longlived.search.run_search", tripwire)
    monkeypatch.setattr("bufsize.longlived.sweep.run_sweep", tripwire)  # the twin's sweep: it would simulate
    monkeypatch.setattr("bufsize.shortflows.series.run_series", tripwire)  # the twin's series: it would simulate
    monkeypatch.setattr("bufsize.longlived.utiltable.run_util_table", tripwire)  # sim util-table: it would simulate
    monkeypatch.setattr(cli.signal, "signal", lambda *a: None)  # main's handlers are for a whole process
    monkeypatch.chdir(tmp_path)  # plot's 'nan', 'inf', ... are paths relative to here

    def run(argv: list[str]) -> tuple[int | None, str]:
        try:
            code = cli.main(argv)
        except SystemExit as e:  # the parser's own errors
            code = e.code if isinstance(e.code, int) else 1
        return code, capsys.readouterr().err

    return run


def command_of(argv: list[str]) -> str:
    return " ".join(argv[:2]) if argv[0] in ("sim", "course") and argv[1] != "--" else argv[0]


# The matrix as what it is: one property per command ("every bad value of every option is refused in
# one line naming it, before anything is made"), checked over all of that command's generated cases.
BY_COMMAND: dict[str, list[tuple[list[str], str]]] = {}
for _case in MATRIX:
    BY_COMMAND.setdefault(command_of(_case[0]), []).append(_case)


def sampled(cases: list, every: int) -> list:
    """Every case, or one in `every` by a stable hash of its id (the fast tier's --matrix-sample)."""
    return [c for c in cases if every == 1 or zlib.crc32(case_id(c).encode()) % every == 0]


@pytest.mark.parametrize("cmd", sorted(BY_COMMAND))
def test_every_bad_value_of_a_command_is_refused_in_one_line_before_anything(cmd, in_process, tmp_path, request):
    cases = sampled(BY_COMMAND[cmd], request.config.getoption("--matrix-sample"))
    failed = []
    for i, case in enumerate(cases):
        argv, needle = case
        out = tmp_path / f"out{i}"
        code, err = in_process(with_out(argv, out))
        try:
            check_refusal(code, err, needle)
            assert not out.exists(), f"{out} was created"
            assert_no_run_here()
        except (AssertionError, pytest.fail.Exception) as e:
            failed.append(f"{case_id(case)}: {' '.join(str(e).split())[:300]}")
    assert not failed, f"{len(failed)} of {len(cases)} cases of {cmd}:\n" + "\n".join(failed[:30])
    print(f"{cmd}: {len(cases)} bad values refused", file=sys.stderr)


def valid_cases() -> list[tuple[str, str, str]]:
    return [(cmd, opt, v) for (cmd, opt), vals in VALID.items() for v in sorted(vals)]


@pytest.mark.parametrize("cmd,opt,value", valid_cases())
def test_valid_edge_values_pass_validation(cmd, opt, value, in_process, tmp_path, capsys):
    """The excluded values really are accepted: validation passes and the command goes on."""
    argv = with_out([*cmd.split(), *BASE[cmd], f"{opt}={value}"], tmp_path / "out")
    if cmd == "model":
        assert in_process(argv) == (0, "")
        return
    with pytest.raises(ReachedRoot):
        in_process(argv)


def run_real(argv: list[str], cwd: Path) -> Isolated:
    """The real command as root, seeing a private /run/netns and run ledger (conftest.isolated): what it
    built is what it left there. One that runs on past TIMEOUT_S is stopped (SIGTERM: it tears down)."""
    res = isolated(argv, cwd, TIMEOUT_S, cwd=cwd)
    if res.ran_on:
        pytest.fail(f"{argv} was not refused: it ran for {TIMEOUT_S} s")
    return res


def assert_built_nothing(res: Isolated) -> None:
    assert res.left == {"netns": [], "ledger": []}, f"{res.args} left {res.left}"


# Every 25th case of the matrix, so each command and most options run for real at least once.
SAMPLE = MATRIX[::25]

# The cases issue 14 names: each used to crash after building, run on, or build before refusing.
KNOWN = [
    (["verify", "--duration", "nan"], "--duration nan"),
    (["verify", "--duration", "inf"], "--duration inf"),
    (["verify", "--duration", "0.001"], "--duration 0.001"),
    (["flows", "--duration", "0.001"], "--duration 0.001"),
    (["util-table", "--out", OUT, "--multiples", "nan"], "--multiples nan"),
    (["search", "--rtt-ms", "0"], "--rtt-ms 0"),
    (["sweep", "--out", OUT, "--flows", "10", "--rtt-ms", "0"], "--rtt-ms 0"),
    (["measure", "--buffer-packets", "10", "--rtt-ms", "0"], "--rtt-ms 0"),
    (["search", "--rate-mbps", "0.1", "--flows", "800", "--hosts", "400"], "--flows 800"),
    (["search", "--resolution", "nan"], "--resolution nan"),
    (["model", "--flows", "1", "--rate-mbps", "1e308"], "--rate-mbps 1e+308"),
    (["plot", ""], "dir ''"),
    (["search", "--out", ""], "--out ''"),
]


@pytest.mark.parallel
@pytest.mark.parametrize("case", KNOWN, ids=case_id)
def test_real_command_refuses_the_known_cases(case, root, tmp_path):
    test_real_command_refuses_and_builds_nothing(case, root, tmp_path)


# One in --matrix-sample of these in the test command (tests/conftest.py), all in make test-extensive.
@pytest.mark.parallel
@pytest.mark.parametrize("case", SAMPLE, ids=case_id)
def test_real_command_refuses_and_builds_nothing(case, root, tmp_path):
    argv, needle = case
    out = tmp_path / "out"
    res = run_real([BUFSIZE, *with_out(argv, out)], tmp_path)
    check_refusal(res.returncode, res.stderr, needle)
    assert not out.exists()
    assert_built_nothing(res)


def bad_outs(tmp_path: Path) -> list[str]:
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    return ["", "/etc/passwd", "/etc/passwd/sub", "/proc/bsz-never", "/dev/null", str(dangling)]


OUT_COMMANDS = [
    ["verify"],
    ["search"],
    ["measure", "--buffer-packets", "10"],
    ["sweep", "--flows", "2"],
    ["util-table"],
    ["quick"],
]


@pytest.mark.parallel
@pytest.mark.parametrize("cmd", OUT_COMMANDS, ids=lambda c: c[0])
def test_bad_out_refused_before_anything_is_built(cmd, root, tmp_path):
    """Including the namespace the qdisc probe builds (sweep --out /etc/passwd used to get that far)."""
    work = tmp_path / "work"
    work.mkdir()
    for out in bad_outs(work):
        res = run_real([BUFSIZE, *cmd, f"--out={out}"], work)
        check_refusal(res.returncode, res.stderr, "--out")
        assert_built_nothing(res)
    assert not Path("/proc/bsz-never").exists() and not (work / "nowhere").exists()
    assert sorted(p.name for p in work.iterdir() if not p.name.startswith("state.")) == ["dangling"]  # '' is not cwd


BINARY_SEARCH = [
    (["--flows", "0"], "--flows 0"),
    (["--rtt-ms", "0"], "--rtt-ms 0"),
    (["--rate-mbps=nan"], "--rate-mbps nan"),
    (["--target=-inf"], "--target -inf"),
    (["--samples="], "--samples"),
    (["--sample-s=1e-9"], "--sample-s 1e-09"),
    (["--fidelity-s=1e308"], "--fidelity-s 1e+308"),
    (["--cc=ÿ€"], "--cc ÿ€"),
    (["--rate-mbps", "0.1", "--flows", "800"], "--flows 800"),
    (["--out="], "--out"),
]


@pytest.mark.parallel
@pytest.mark.parametrize("case", BINARY_SEARCH, ids=case_id)
def test_binary_search_script_refuses_too(case, root, tmp_path):
    args, needle = case
    work = tmp_path / "work"
    work.mkdir()
    res = run_real([sys.executable, str(REPO / "binary_search.py"), *args], work)
    check_refusal(res.returncode, res.stderr, needle)
    assert_built_nothing(res)
    assert [p for p in os.listdir(work) if not p.startswith("state.")] == []
