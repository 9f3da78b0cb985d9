"""`python -m claims.launch [--fault NAME] -- ARGS`: `bufsize ARGS` with a fault planted first
(claims/faults.py), in this process; without --fault, exactly `bufsize ARGS`. Its exit status is the
command's."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    if "--" not in argv:
        raise SystemExit("usage: python -m claims.launch [--fault NAME] -- BUFSIZE-ARGS")
    cut = argv.index("--")
    own, args = argv[:cut], argv[cut + 1 :]
    if own[:1] == ["--fault"] and len(own) == 2:
        from claims.faults import plant

        plant(own[1])
    elif own:
        raise SystemExit(f"claims.launch: unknown options {own}")
    from bufsize.cli import main as bufsize_main

    return bufsize_main(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
