"""The 2012 Mininet-HiFi buffersizing script's command line, translated to `bufsize search`'s.

    --bw-net 62.5 --bw-host 1000 --delay 43.5 -n 3 --nflows 400 --maxq 100 --cong bic --dir D --target 0.98

2012 meaning -> today's option:
- `--bw-net` Mb/s of the bottleneck -> `--rate-mbps`; `--bw-host` Mb/s of each host link -> `--access-mbps`
- `--delay` ms of one-way delay on each sender's link (43.5 gave the 87 ms RTT) -> `--rtt-ms 2 x delay`
- `-n` nodes including the receiver -> `--hosts n - 1`; `--nflows` flows per sender -> `--flows nflows x (n - 1)`
- `--maxq` packets, the largest buffer the search tries -> `--max-buffer-packets`
- `--cong` -> `--cc` (bic, where the kernel has none, -> cubic); `--dir` -> `--out`; `--target` -> `--target`
- `--iperf PATH` (the patched iperf) is accepted and ignored: iperf 2.1's --txdelay-time replaced the patch.
Anything else is passed through unchanged, so today's options can be mixed in.
"""

from __future__ import annotations

import argparse

from bufsize.longlived.presets import hardware_cc
from bufsize.topologies.errors import UsageError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(add_help=False, allow_abbrev=False)
    p.add_argument("--bw-net", "-b", type=float)
    p.add_argument("--bw-host", "-B", type=float)
    p.add_argument("--delay", type=float)
    p.add_argument("-n", type=int)
    p.add_argument("--nflows", type=int)
    p.add_argument("--maxq", type=int)
    p.add_argument("--cong")
    p.add_argument("--dir", "-d")
    p.add_argument("--iperf")
    return p


# What `binary_search.py --help` adds after `bufsize search`'s options: each 2012 option, what it becomes.
HELP_2012 = """
2012 options (the Mininet-HiFi buffersizing script's; translated, and today's options may be mixed in):
  --bw-net, -b MBPS   bottleneck rate                      -> --rate-mbps MBPS
  --bw-host, -B MBPS  each host's access link rate         -> --access-mbps MBPS
  --delay MS          one-way delay on each sender's link  -> --rtt-ms 2*MS (43.5 gave the 87 ms RTT)
  -n NODES            nodes including the receiver         -> --hosts NODES-1
  --nflows K          flows per sender (needs -n)          -> --flows K*(NODES-1)
  --maxq PACKETS      the largest buffer the search tries  -> --max-buffer-packets PACKETS
  --cong CC           congestion control                   -> --cc CC (bic -> cubic where the kernel has no bic)
  --dir, -d DIR       where results go                     -> --out DIR
  --iperf PATH        the patched iperf                    -> ignored (iperf 2.1's --txdelay-time replaced the patch)
"""


def translate(argv: list[str]) -> tuple[list[str], list[str]]:
    """(arguments for `bufsize search`, notes about what was translated)."""
    old, rest = parser().parse_known_args(argv)
    out: list[str] = []
    notes: list[str] = []
    if old.n is not None:
        if old.n < 2:
            raise UsageError(f"-n {old.n}: counts the receiver too, so at least 2")
        out += ["--hosts", str(old.n - 1)]
        if old.nflows is not None:
            out += ["--flows", str(old.nflows * (old.n - 1))]
    elif old.nflows is not None:
        raise UsageError("--nflows counts flows per sender: give -n (senders + 1) with it")
    if old.bw_net is not None:
        out += ["--rate-mbps", f"{old.bw_net:g}"]
    if old.bw_host is not None:
        out += ["--access-mbps", f"{old.bw_host:g}"]
    if old.delay is not None:
        out += ["--rtt-ms", f"{2 * old.delay:g}"]
    if old.maxq is not None:
        out += ["--max-buffer-packets", str(old.maxq)]
    if old.cong is not None:
        cc = old.cong
        if cc == "bic" and hardware_cc() != "bic":
            cc = "cubic"  # BIC's successor, and the default of the 2008 hardware's era after it
            notes.append("--cong bic: this kernel has no bic, using cubic (design-notes section 5)")
        out += ["--cc", cc]
    if old.dir is not None:
        out += ["--out", old.dir]
    if old.iperf is not None:
        notes.append(f"--iperf {old.iperf} ignored: iperf 2.1's --txdelay-time replaces the 2012 patch")
    if out:
        notes.append("2012 options translated to: " + " ".join(out))
    return out + rest, notes
