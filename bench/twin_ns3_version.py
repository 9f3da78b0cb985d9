"""The twin under other ns-3 releases: the same searches with bsz-nssim built against older ns3
wheels, beside the installed one, 3 seeds each.

The independent simulation that showed no cliff at N = 100 ran ns-3 3.37; the ns3 wheels on PyPI
are 3.39, 3.42, 3.43 and 3.44, so those are the releases tried (every one for the fast rows, the
oldest for the slow one). The bench installs each into a scratch directory (pip --target, nothing
of the venv's touched), builds the helper from the same sources against it (C++17: 3.39's headers
do not compile as C++20), and runs `bufsize sim search` in a child Python whose twin uses that
helper and records that release. Both releases run with the helper's fast
paths off (its endpoint cache replaces two ns-3 members and was checked against 3.44 only), so each
row is ns-3's own code.

    .venv/bin/python bench/twin_ns3_version.py > bench/results/twin-ns3-version.md
    .venv/bin/python bench/twin_ns3_version.py --measures >> bench/results/twin-ns3-version.md
    .venv/bin/python bench/twin_ns3_version.py --recovery >> bench/results/twin-ns3-version.md

`--measures` holds the buffer fixed instead (`bufsize sim measure`, 20 simulated seconds) and
reports how the flows recovered from their losses under each release: retransmission timeouts and
SACK recoveries per retransmitted segment, beside utilization and the loss rate. `--recovery`
searches on the installed release with ns-3's classic fast recovery in place of its Proportional
Rate Reduction (PRR, ns-3's default), at the N either side of the cliff and CUBIC's two.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OLD_WHEELS = ("ns3==3.43.post9", "ns3==3.42.post2", "ns3==3.39.post2")
SEEDS = (1, 2, 3)
LIBS = ("core", "network", "internet", "point-to-point", "applications", "traffic-control", "bridge", "stats",
        "mobility")  # fmt: skip
# (what, the search's options, every release or only the installed and the oldest): the twin's cliff
# (reno, N = 100) and its CUBIC at the two N where it needs 1.7-2 x the emulated Linux's buffer.
ROWS: list[tuple[str, list[str], bool]] = [
    ("reno, N = 100", ["--flows", "100", "--cc", "reno"], True),
    ("cubic, N = 10", ["--flows", "10", "--cc", "cubic"], True),
    ("cubic, N = 2", ["--flows", "2", "--cc", "cubic"], False),
]
# (what, the measure's options) for --measures: buffers where the releases' searches disagree.
MEASURES: list[tuple[str, list[str]]] = [
    ("reno, N = 100, 11 packets", ["--flows", "100", "--cc", "reno", "--buffer-packets", "11"]),
    ("reno, N = 100, 22 packets", ["--flows", "100", "--cc", "reno", "--buffer-packets", "22"]),
    ("cubic, N = 10, 48 packets", ["--flows", "10", "--cc", "cubic", "--buffer-packets", "48"]),
]
# (what, the search's options) for --recovery: the cliff's neighbours too, and CUBIC's two N.
RECOVERY_ROWS: list[tuple[str, list[str]]] = [
    (f"{cc}, N = {n}", ["--flows", str(n), "--cc", cc]) for cc, n in [("reno", 50), ("reno", 100), ("reno", 200),
                                                                     ("cubic", 2), ("cubic", 10)]
]  # fmt: skip
# Run in the child: the twin's helper and the release its results name, then the command line.
CHILD = """
import sys
from pathlib import Path
import bufsize.scaffold.twin as tw
import bufsize.topologies.nssim as nssim
from bufsize.cli import main
helper, version, wheel, *argv = sys.argv[1:]
nssim.HELPER = tw.HELPER = Path(helper)
tw.ns3_version = lambda: version
tw.NS3_WHEEL = wheel
sys.exit(main(argv))
"""


def build(wheel: str, scratch: Path) -> tuple[Path, str]:
    """The helper against `wheel`, in `scratch`, run through a script that turns its fast paths off;
    returns the script and the release."""
    site = scratch / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), wheel]
    subprocess.run(pip, check=True)
    ns3 = site / "ns3"
    (core,) = (ns3 / "lib64").glob("libns3*-core.so")
    prefix = core.name.removeprefix("lib").removesuffix("-core.so")  # ns3-dev (3.39) or ns3.44
    binary = scratch / "bsz-nssim"
    src = REPO / "topologies" / "nssim"
    gxx = ["g++", "-O2", "-isystem", str(ns3 / "include"), "-rdynamic", "-o", str(binary), str(src / "nssim.cc"),
           str(src / "demux_cache.cc"), f"-L{ns3 / 'lib64'}", f"-Wl,-rpath,{ns3 / 'lib64'}",
           *(f"-l{prefix}-{lib}" for lib in LIBS), "-ldl"]  # fmt: skip
    # C++20 as the Makefile builds; releases whose headers predate it (3.39) only as C++17.
    if subprocess.run([*gxx, "-std=c++20"], capture_output=True).returncode != 0:
        subprocess.run([*gxx, "-std=c++17"], check=True)
    return wrapped(binary, scratch), re.sub(r"\.post\d+$", "", wheel.split("==")[1])


def wrapped(binary: Path, scratch: Path) -> Path:
    script = scratch / f"{binary.name}-no-fast-paths"
    script.write_text(f'#!/bin/sh\nexec {binary} "$@" --fast-paths 0\n')
    script.chmod(0o755)
    return script


def search(
    helper: Path, version: str, wheel: str, args: list[str], seed: int, out: Path, command: str = "search"
) -> tuple[dict, float]:
    t = time.monotonic()
    cmd = [sys.executable, "-c", CHILD, str(helper), version, wheel, "sim", command, *args, "--seed", str(seed),
           "--json", "--out", str(out)]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if res.returncode not in (0, 3):  # 3: a flagged run, still an answer
        raise RuntimeError(f"{' '.join(cmd[3:])}: {res.stderr[-800:]}")
    return json.loads(res.stdout), time.monotonic() - t


def releases(scratch: Path) -> list[tuple[Path, str, str]]:
    """(helper, release, wheel) for the installed release and each older wheel, built in `scratch`."""
    from bufsize.topologies.nssim import HELPER, NS3_WHEEL, ns3_version

    sims = [(wrapped(HELPER, scratch), str(ns3_version()), NS3_WHEEL)]
    for i, wheel in enumerate(OLD_WHEELS):
        (scratch / f"w{i}").mkdir()
        sims.append((*build(wheel, scratch / f"w{i}"), wheel))
    return sims


def measures() -> None:
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bsz-ns3-") as tmp:
        scratch = Path(tmp)
        sims = releases(scratch)
        jobs = [(r, v, s) for r in range(len(MEASURES)) for v in range(len(sims)) for s in SEEDS]
        with ThreadPoolExecutor(2) as pool:
            done = list(pool.map(lambda j: search(*sims[j[1]], [*MEASURES[j[0]][1], "--duration", "20"], j[2],
                                                  scratch / f"m{j[0]}v{j[1]}s{j[2]}", "measure"), jobs))  # fmt: skip
    got = {j: d[0] for j, d in zip(jobs, done, strict=True)}
    print("\n| fixed buffer | ns-3 | utilization, seeds 1-3 | loss rate (median) | timeouts per retransmission "
          "(median) | SACK recoveries per retransmission (median) |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for r, (name, _) in enumerate(MEASURES):
        for v, (_, version, _) in enumerate(sims):
            res = [got[(r, v, s)] for s in SEEDS]
            # None before 3.43, which has no Retransmission trace to count by (nan); else the median.
            med = {
                k: statistics.median([x["tcp"][k] for x in res if x["tcp"][k] is not None] or [float("nan")])
                for k in ("timeouts_per_retrans", "recoveries_per_retrans")
            }
            utils = ", ".join(f"{x['utilization']:.4f}" for x in res)
            print(f"| {name} | {version} | {utils} | "
                  f"{statistics.median(x['loss_rate'] for x in res):.4f} | {med['timeouts_per_retrans']:.4f} | "
                  f"{med['recoveries_per_retrans']:.4f} |")  # fmt: skip
    print(f"\n{len(jobs)} measures of 20 simulated seconds, two at a time, in {time.monotonic() - t0:.0f} s of wall.")


def recovery() -> None:
    from bufsize.topologies.nssim import HELPER, NS3_WHEEL, ns3_version

    t0 = time.monotonic()
    classic = ["--ns3-attribute", "ns3::TcpL4Protocol::RecoveryType=ns3::TcpClassicRecovery"]
    rows = RECOVERY_ROWS
    with tempfile.TemporaryDirectory(prefix="bsz-ns3-") as tmp:
        scratch = Path(tmp)
        sim = (wrapped(HELPER, scratch), str(ns3_version()), NS3_WHEEL)
        jobs = [(r, s) for r in range(len(rows)) for s in SEEDS]
        with ThreadPoolExecutor(2) as pool:
            done = list(pool.map(lambda j: search(*sim, [*rows[j[0]][1], *classic], j[1], scratch / f"c{j[0]}s{j[1]}"),
                                 jobs))  # fmt: skip
    got = {j: d[0] for j, d in zip(jobs, done, strict=True)}
    print(f"\n| search | ns-3 {sim[1]} with `{' '.join(classic)}`: answers, seeds 1-3 (packets) | median |")
    print("|---|---|---|")
    for r, (name, _) in enumerate(rows):
        answers = [got[(r, s)]["buffer_packets"] for s in SEEDS]
        print(f"| {name} | {', '.join(map(str, answers))} | {statistics.median(answers):g} |")
    print(f"\n{len(jobs)} searches, two at a time, in {time.monotonic() - t0:.0f} s of wall.")


def main() -> None:
    if sys.argv[1:] in (["--measures"], ["--recovery"]):
        (measures if sys.argv[1] == "--measures" else recovery)()
        return
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bsz-ns3-") as tmp:
        scratch = Path(tmp)
        sims = releases(scratch)
        ends = (0, len(sims) - 1)
        jobs = [(r, v, s) for r in range(len(ROWS)) for v in range(len(sims)) for s in SEEDS if ROWS[r][2] or v in ends]
        with ThreadPoolExecutor(2) as pool:  # one simulator a core
            done = list(pool.map(lambda j: search(*sims[j[1]], ROWS[j[0]][1], j[2], scratch / f"r{j[0]}v{j[1]}s{j[2]}"),
                                 jobs))  # fmt: skip
    got = dict(zip(jobs, done, strict=True))
    print("| search | ns-3 | answers, seeds 1-3 (packets) | median | conditioning range (seed 1) | wall a search (s) |")
    print("|---|---|---|---|---|---|")
    for r, (name, _, every) in enumerate(ROWS):
        for v, (_, version, _) in enumerate(sims):
            if not (every or v in ends):
                continue
            results = [got[(r, v, s)][0] for s in SEEDS]
            answers = [x["buffer_packets"] for x in results]
            cond = results[0].get("conditioning") or {}
            walls = [got[(r, v, s)][1] for s in SEEDS]
            print(
                f"| {name} | {version} | {', '.join(map(str, answers))} | {statistics.median(answers):g} | "
                f"{cond.get('range_packets')} | {min(walls):.0f}-{max(walls):.0f} |"
            )
    print(f"\n{len(jobs)} searches, two at a time, in {time.monotonic() - t0:.0f} s of wall (the build included).")


if __name__ == "__main__":
    main()
