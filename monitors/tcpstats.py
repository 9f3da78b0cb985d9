"""How the senders found and repaired their losses: the kernel's TCP counters, summed over the
senders' namespaces (each namespace counts its own, in /proc/net/snmp and /proc/net/netstat).

A loss is repaired by fast recovery (three duplicate ACKs, SACK or RACK), by a tail-loss probe, or
by the retransmission timeout, which also cuts the window to one packet; with many flows and tiny
windows the share of timeouts is what the twin and the emulation may differ in. Reading a
namespace's files costs one setns() and two reads, no process, so a 400-host run reads them at
every probe.
"""

from __future__ import annotations

from collections.abc import Sequence

from bufsize.topologies import netns

# Our name -> (file under /proc/thread-self/net, section, the kernel's field).
COUNTERS: dict[str, tuple[str, str, str]] = {
    "out_segs": ("snmp", "Tcp", "OutSegs"),  # new segments: the kernel leaves out those sent again
    "retrans_segs": ("snmp", "Tcp", "RetransSegs"),
    "timeouts": ("netstat", "TcpExt", "TCPTimeouts"),
    "loss_probes": ("netstat", "TcpExt", "TCPLossProbes"),
    "sack_recoveries": ("netstat", "TcpExt", "TCPSackRecovery"),
    "reno_recoveries": ("netstat", "TcpExt", "TCPRenoRecovery"),
    "spurious_rtos": ("netstat", "TcpExt", "TCPSpuriousRTOs"),
}


def parse_proc_counters(text: str) -> dict[str, dict[str, int]]:
    """/proc/net/snmp or netstat: pairs of lines, 'Section: names...' then 'Section: values...'."""
    out: dict[str, dict[str, int]] = {}
    lines = [ln.split() for ln in text.splitlines() if ln.strip()]
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if not names or names[0] != values[0] or len(names) != len(values):
            raise ValueError(f"unexpected /proc counter lines: {' '.join(names[:3])} / {' '.join(values[:3])}")
        out[names[0].rstrip(":")] = {n: int(v) for n, v in zip(names[1:], values[1:], strict=True)}
    return out


def pick_counters(files: dict[str, str]) -> dict[str, int]:
    """Our counters from the text of each file; a field this kernel lacks reads as 0."""
    parsed = {name: parse_proc_counters(text) for name, text in files.items()}
    return {key: parsed[f].get(sec, {}).get(field, 0) for key, (f, sec, field) in COUNTERS.items()}


def read_namespace(ns: str) -> dict[str, int]:
    # /proc/thread-self/net is the calling thread's namespace, which entered() switches.
    with netns.entered(ns):
        files = {}
        for name in ("snmp", "netstat"):
            with open(f"/proc/thread-self/net/{name}") as f:
                files[name] = f.read()
    return pick_counters(files)


def read_counters(namespaces: Sequence[str]) -> dict[str, int]:
    total = dict.fromkeys(COUNTERS, 0)
    for ns in namespaces:
        for k, v in read_namespace(ns).items():
            total[k] += v
    return total


def counter_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in COUNTERS}


def recovery_shares(d: dict[str, int]) -> dict[str, float | None]:
    """Per retransmitted segment: how many were timeouts, tail-loss probes and fast recoveries."""
    r = d.get("retrans_segs", 0)
    if r <= 0:
        return {"timeouts_per_retrans": None, "probes_per_retrans": None, "recoveries_per_retrans": None}
    return {
        "timeouts_per_retrans": round(d.get("timeouts", 0) / r, 4),
        "probes_per_retrans": round(d.get("loss_probes", 0) / r, 4),
        "recoveries_per_retrans": round((d.get("sack_recoveries", 0) + d.get("reno_recoveries", 0)) / r, 4),
    }


def twin_counters(counts: Sequence[dict[str, int]]) -> dict[str, int]:
    """The twin's counts over intervals (topologies/nssim.py Interval.tcp) under the kernel's names
    and meanings: OutSegs leaves out segments sent again (the helper counts every data segment),
    its recoveries are SACK recoveries, and ns-3 has no tail-loss probe (0, not unknown)."""
    total = {k: sum(c.get(k, 0) for c in counts) for k in ("out_segs", "retrans_segs", "timeouts")}
    total["out_segs"] -= total["retrans_segs"]
    return total | {"loss_probes": 0, "sack_recoveries": sum(c.get("recoveries", 0) for c in counts)}
