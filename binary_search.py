#!/usr/bin/env python3
"""Find the smallest bottleneck buffer that keeps the link at 99% utilization for N flows.

The same as `bufsize search` (see `--help`), kept at the top level where the 2012 testbed had it:

    sudo ./binary_search.py --flows 50 --hosts 50 --cc cubic --out results/search-n50

It also takes the 2012 script's options (buffersizing/cli/compat2012.py says how each maps), and
`--print-config` prints the resolved configuration as JSON without building anything:

    ./binary_search.py --bw-net 62.5 --delay 43.5 -n 3 --nflows 400 --maxq 100 --cong bic --print-config
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent
VENV_PYTHON = REPO / ".venv" / "bin" / "python"

if __name__ == "__main__":
    try:
        from bufsize.cli import main
        from bufsize.cli.compat2012 import translate
        from bufsize.topologies.errors import UsageError
    except ImportError:
        # Run with a python that lacks the dependencies: hand over to the project's virtualenv.
        if VENV_PYTHON.exists() and Path(sys.prefix).resolve() != VENV_PYTHON.parents[1].resolve():
            os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), str(Path(__file__).resolve()), *sys.argv[1:]])
        sys.exit("binary_search.py: dependencies missing; run ./setup.sh first")
    if {"-h", "--help"} & set(sys.argv[1:]):
        from bufsize.cli.compat2012 import HELP_2012

        try:
            main(["search", "--help"])
        except SystemExit:
            pass
        sys.exit(print(HELP_2012, end="") or 0)
    try:
        args, notes = translate(sys.argv[1:])
    except UsageError as e:
        sys.exit(print(f"binary_search.py: {e}", file=sys.stderr) or 2)
    for note in notes:
        print(f"binary_search.py: {note}", file=sys.stderr)
    sys.exit(main(["search", *args]))
