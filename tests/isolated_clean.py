"""Test helper: `bufsize clean` against a private state directory and a private /run/netns.

    unshare --mount --propagation private python isolated_clean.py STATE_DIR [--add NAME ...]

A tmpfs on /run/netns (in this mount namespace only) means the clean sees only the namespaces
added here and can never touch the machine's real ones (other engineers' live runs). Prints JSON:
the clean's exit status, stdout and stderr, and the namespaces left afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BUFSIZE = str(Path(sys.executable).parent / "bufsize")


def main(argv: list[str]) -> int:
    state, names = argv[0], argv[1:]
    assert names[::2] == ["--add"] * (len(names) // 2), "usage: STATE_DIR [--add NAME ...]"
    subprocess.run(["mount", "-t", "tmpfs", "bsz-test-netns", "/run/netns"], check=True)
    for name in names[1::2]:
        subprocess.run(["ip", "netns", "add", name], check=True)
    res = subprocess.run(
        [BUFSIZE, "clean"], capture_output=True, text=True, timeout=120, env=os.environ | {"BUFSIZE_STATE_DIR": state}
    )
    left = sorted(os.listdir("/run/netns"))
    print(json.dumps({"rc": res.returncode, "stdout": res.stdout, "stderr": res.stderr, "netns": left}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
