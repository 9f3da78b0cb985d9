"""The test command's closing lines (tests/stages.sh): the slowest tests of the structure stage, from its
JUnit report, and the claims' verdicts, from the claims stage's JSON. A file that is missing (its stage
did not get that far) is said, not an error.

    python tests/stage_summary.py --junit SERIAL.xml PARALLEL.xml --claims CLAIMS.json [--slowest 10]
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def slowest(reports: list[Path], n: int) -> list[str]:
    """The n slowest tests of all the reports that exist, 'SECONDS  FILE::NAME', slowest first."""
    cases = []
    found = [ET.parse(r) for r in reports if r.exists()]
    if not found:
        raise OSError(f"none of {', '.join(map(str, reports))}")
    for case in (c for tree in found for c in tree.iter("testcase")):
        path = (case.get("classname") or "").replace(".", "/") + ".py"
        cases.append((float(case.get("time") or 0), f"{path}::{case.get('name')}"))
    return [f"{t:7.1f} s  {name}" for t, name in sorted(cases, reverse=True)[:n]]


def verdicts(claims: Path) -> list[str]:
    record = json.loads(claims.read_text())
    counts: dict[str, int] = {}
    for v in record["verdicts"]:
        counts[v["verdict"]] = counts.get(v["verdict"], 0) + 1
    skipped = f", {counts['not judged']} not judged (skipped on purpose)" if counts.get("not judged") else ""
    lines = [f"claims: {counts.get('held', 0)} held, {counts.get('broken', 0)} broken, "
             f"{counts.get('inconclusive', 0)} inconclusive{skipped} in {record['seconds']} s"]  # fmt: skip
    lines += [f"  {v['claim']}: {v['verdict']}" + (f" ({v['why']})" if v["why"] else "") for v in record["verdicts"]
              if v["verdict"] != "held"]  # fmt: skip
    return lines


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--junit", type=Path, nargs="+", required=True)
    p.add_argument("--claims", type=Path, required=True)
    p.add_argument("--slowest", type=int, default=10)
    a = p.parse_args(argv)
    print(f"the {a.slowest} slowest tests of the structure stage:")
    try:
        print("\n".join(slowest(a.junit, a.slowest)))
    except (OSError, ET.ParseError) as e:
        print(f"  (no report: {e})")
    try:
        print("\n".join(verdicts(a.claims)))
    except (OSError, ValueError, KeyError) as e:
        print(f"claims: no verdicts ({e})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
