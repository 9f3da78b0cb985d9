"""Show that this machine's iperf does what the 2012 patch added: many clients, held until all are up.

    .venv/bin/python iperf-patch/check_iperf.py [--flows 800] [--hosts 2]

1. refuses an iperf older than 2.1 or without --txstart-time (what replaces the patch's sleep);
2. builds a dumbbell, connects N flows to one iperf server, and checks that all N are established
   before the common first write and then carry data (bufsize flows).
Exit status 0 when both hold.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bufsize.topologies.errors import MachineError  # noqa: E402
from bufsize.topologies.machine import iperf2_version  # noqa: E402
from bufsize.traffic.longflows import check_iperf2  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flows", type=int, default=800)
    ap.add_argument("--hosts", type=int, default=2)
    a = ap.parse_args()
    try:
        check_iperf2()
    except MachineError as e:
        print(f"FAIL: {e}")
        return 1
    print(f"iperf {'.'.join(map(str, iperf2_version() or ()))}: has --txstart-time and --txdelay-time")
    bufsize = Path(sys.executable).parent / "bufsize"
    res = subprocess.run(
        [str(bufsize), "flows", "--flows", str(a.flows), "--hosts", str(a.hosts), "--duration", "3", "--json"],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        print(f"FAIL: {res.stderr.strip()}")
        return 1
    s = json.loads(res.stdout)
    ok = (
        s["established"] == a.flows
        and s["held_until_all_up"]
        and s["bottleneck_rate_mbps"] > 0.9 * s["configured_rate_mbps"]
    )
    print(
        f"{s['established']} of {a.flows} connections to one server established in "
        f"{s['seconds_to_all_established']} s, {'held' if s['held_until_all_up'] else 'NOT held'} until all were "
        f"up, then {s['bottleneck_rate_mbps']} Mb/s at the bottleneck: {'OK' if ok else 'FAIL'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
