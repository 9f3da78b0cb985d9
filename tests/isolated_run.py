"""Test helper: a command as root that sees only a private /run/netns and a private run ledger.

    unshare --mount --propagation private python isolated_run.py STATE_DIR TIMEOUT_S -- ARGV...

A tmpfs on /run/netns (in this mount namespace only) and BUFSIZE_STATE_DIR set to STATE_DIR (an empty
directory of the test's): whatever network namespace or ledger file ARGV makes lands there, where this
helper lists it afterwards, and nothing another test or run makes at the same time can be mistaken
for it. So a refusal test can say "it built nothing" while other tests build dumbbells beside it.
A command still running at TIMEOUT_S is sent SIGTERM (it tears down what it built) and reported.
Prints JSON: the exit status, stdout, stderr, whether it ran out of time, and what it left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

NETNS = Path("/run/netns")


def main(argv: list[str]) -> int:
    state, timeout, sep, *cmd = argv
    assert sep == "--" and cmd, "usage: STATE_DIR TIMEOUT_S -- ARGV..."
    NETNS.mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "bsz-test-netns", str(NETNS)], check=True)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=os.environ | {"BUFSIZE_STATE_DIR": state})  # fmt: skip
    ran_on = False
    try:
        out, err = p.communicate(timeout=float(timeout))
    except subprocess.TimeoutExpired:
        ran_on = True
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=120)
    left = {
        "netns": sorted(os.listdir(NETNS)),
        "ledger": sorted(q.name for q in Path(state).glob("run-*.json")),
    }
    print(json.dumps({"rc": p.returncode, "stdout": out, "stderr": err, "ran_on": ran_on, "left": left}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
