"""The delay line's frame and map parsers under libFuzzer, time-boxed (issue 32, item 6).

topologies/delayline/fuzz_parsers.c compiles the delay line's own code with clang's
-fsanitize=fuzzer,address,undefined; any crash, sanitizer report or hang fails the run. CI gives
it FUZZ_SECONDS; bench/fuzz_delayline.sh runs it longer and writes the result down.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

DELAYLINE_DIR = Path(__file__).resolve().parent.parent / "topologies" / "delayline"
TARGET = DELAYLINE_DIR / "bsz-fuzz-parsers"
FUZZ_SECONDS = 10  # a smoke test of the build and the harness; bench/fuzz_delayline.sh fuzzes for long
# Leak checks off, at exit too: a refused map returns to the fuzzer by longjmp and leaves that
# call's FILE behind, as the delay line would have exited there (fuzz_parsers.c).
ENV = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0"}

# No root and no namespace: it runs beside the other such tests on every core (make test), not in make fast.
pytestmark = pytest.mark.slow


def ipv4_frame(src: str, dst: str, vlans: int = 0) -> bytes:
    eth = b"\x02" * 6 + b"\x04" * 6
    tags = b"".join(struct.pack("!HH", 0x8100, 10 + i) for i in range(vlans))
    ip = bytes([0x45, 0, 0, 40]) + b"\0" * 8 + bytes(map(int, src.split("."))) + bytes(map(int, dst.split(".")))
    return eth + tags + b"\x08\x00" + ip + b"\0" * 20


def seeds(corpus: Path) -> None:
    """Valid inputs of each kind, so the fuzzer starts inside the formats rather than outside them."""
    corpus.mkdir()
    items = {
        "frame-fwd": b"\x05" + ipv4_frame("10.0.0.1", "10.0.1.1"),
        "frame-rev": b"\x03" + ipv4_frame("10.0.1.1", "10.0.0.1"),
        "frame-qinq": b"\x05" + ipv4_frame("10.0.0.2", "10.0.1.1", vlans=2),
        "map": b"\x00" + b"10.0.0.1 43500 43500\n10.0.0.2 1e3 0.5 # a comment\n\n",
        "map-bad": b"\x00" + b"10.0.0.1 43500\n",
    }
    for name, data in items.items():
        (corpus / name).write_bytes(data)


def test_parsers_survive_libfuzzer(tmp_path: Path) -> None:
    assert shutil.which("clang"), "clang is needed for the fuzz target: ./setup.sh test installs it"
    subprocess.run(["make", "-s", "-C", str(DELAYLINE_DIR), "fuzz"], check=True, timeout=300)
    corpus = tmp_path / "corpus"
    seeds(corpus)
    res = subprocess.run(
        [str(TARGET), f"-max_total_time={FUZZ_SECONDS}", "-detect_leaks=0", "-timeout=5", "-rss_limit_mb=2048",
         "-close_fd_mask=2", "-print_final_stats=1", f"-artifact_prefix={tmp_path}/", str(corpus)],
        capture_output=True, text=True, timeout=FUZZ_SECONDS + 120, env=ENV,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert "ERROR: " not in res.stderr and "runtime error" not in res.stderr, res.stderr[-3000:]
    runs = re.search(r"stat::number_of_executed_units:\s+(\d+)", res.stderr)
    assert runs and int(runs.group(1)) > 10_000, res.stderr[-2000:]
    # Coverage grew past the seeds: the fuzzer explored, it did not just replay them.
    assert len(list(corpus.iterdir())) > 5


def test_the_target_catches_a_planted_bug(tmp_path: Path) -> None:
    """The harness is not blind: a parser that reads one byte past the frame is caught at once."""
    assert shutil.which("clang")
    work = tmp_path / "src"
    work.mkdir()
    for part in [*DELAYLINE_DIR.glob("*.c"), *DELAYLINE_DIR.glob("*.h")]:  # the delay line's parts, as built
        shutil.copy(part, work)
    src = (work / "delay.c").read_text()  # delay_for(), the frame parser
    planted = src.replace("if (type == ETH_P_IP && len >= l3 + 20) {", "if (type == ETH_P_IP && len >= l3 + 1) {")
    assert planted != src
    (work / "delay.c").write_text(planted)
    target = work / "fuzz"
    subprocess.run(
        ["clang", "-g", "-O1", "-fsanitize=fuzzer,address", "-o", str(target), str(work / "fuzz_parsers.c")],
        check=True, timeout=300,
    )  # fmt: skip
    res = subprocess.run(
        [str(target), "-max_total_time=60", "-detect_leaks=0", "-close_fd_mask=2", f"-artifact_prefix={tmp_path}/"],
        capture_output=True, text=True, timeout=180, cwd=tmp_path, env=ENV,
    )  # fmt: skip
    assert res.returncode != 0 and "AddressSanitizer" in res.stderr, res.stderr[-2000:]
