"""`bufsize remote` without the network: machines as given, who runs which point, the command each
runs, and the check of a point pulled back before it joins the merged sweep.

Everything here is pure (no SSH, no subprocess), so it is unit-tested directly.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bufsize.longlived.sweep import SweepSpec, finished, grown_manifest, point_dir
from bufsize.scaffold.resultdir import read_finished, write_json_atomic
from bufsize.scaffold.schema import stamp
from bufsize.topologies.errors import UsageError
from bufsize.topologies.units import digits

Point = tuple[int, int]
DEFAULT_REMOTE_DIR = "/var/lib/bufsize-remote"

_USER = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")
_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252})")  # a DNS name or an IPv4 address
_V6 = re.compile(r"[0-9A-Fa-f:.]{2,45}")


@dataclass(frozen=True)
class Machine:
    """One machine to run on, as `[USER@]ADDRESS[:PORT]` (IPv6 as `[ADDR]:PORT`)."""

    user: str
    address: str
    port: int = 22

    @property
    def label(self) -> str:
        """How results and progress name it: the address and a port other than 22, never the user
        (a login name says something about the account; the address is what the user chose to show)."""
        addr = f"[{self.address}]" if ":" in self.address else self.address
        return addr if self.port == 22 else f"{addr}:{self.port}"

    @property
    def path_label(self) -> str:
        """The label as one path component (for `--remote-dir` with {machine} in it)."""
        return re.sub(r"[^A-Za-z0-9.-]", "_", self.label.replace("[", "").replace("]", ""))


def parse_machine(text: str, default_user: str = "root") -> Machine:
    """Checked strictly: these strings reach SSH and, as labels, file names and results."""
    bad = f"--machine {text!r}: expected [USER@]ADDRESS[:PORT], like root@203.0.113.7 or admin@vm1:2222"
    user, at, rest = text.strip().rpartition("@")
    user = user if at else default_user
    if not _USER.fullmatch(user):
        raise UsageError(bad + " (the user name is not a plain login name)")
    port = "22"
    if rest.startswith("["):  # [v6]:port or [v6]
        addr, sep, tail = rest[1:].partition("]")
        if not sep or not _V6.fullmatch(addr) or (tail and not tail.startswith(":")):
            raise UsageError(bad)
        port = tail[1:] or port
    else:
        addr, sep, p = rest.partition(":")
        port = p if sep else port
        if not _NAME.fullmatch(addr):
            raise UsageError(bad)
    if not digits(port) or not 1 <= int(port) <= 65535:
        raise UsageError(bad + " (the port must be 1 to 65535)")
    return Machine(user, addr, int(port))


def parse_machines(given: list[str]) -> list[Machine]:
    parts = [part.strip() for g in given for part in g.split(",")]
    if not all(parts):
        raise UsageError(f"--machine {','.join(given)!r}: an empty entry; give [USER@]ADDRESS[:PORT] for each machine")
    machines = [parse_machine(part) for part in parts]
    labels = [m.label for m in machines]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise UsageError(f"--machine: {', '.join(twice)} given twice")
    return machines


def point_name(point: Point) -> str:
    return point_dir(Path("."), *point).name


def sweep_argv(spec: SweepSpec) -> list[str]:
    """The `bufsize sweep` options that describe `spec` exactly (every value given, so a preset's
    choices made here, such as bic or cubic, are the ones every machine runs)."""
    s = spec.search
    argv = ["--flows", ",".join(map(str, spec.flows)), "--runs", str(spec.runs), "--hosts", str(spec.max_hosts)]
    if spec.preset:
        argv += ["--preset", spec.preset]
    argv += ["--rate-mbps", repr(spec.rate_mbps), "--rtt-ms", spec.rtt_ms, "--cc", spec.cc, "--shaper", spec.shaper]
    if spec.burst_bytes is not None:
        argv += ["--burst-bytes", str(spec.burst_bytes)]
    argv += ["--delay-backend", spec.delay_backend, "--access-mbps", repr(spec.access_mbps)]
    argv += ["--pacer", "on" if spec.pacer else "off", "--loss-recovery", spec.loss_recovery]
    argv += ["--delayed-ack", "on" if spec.delayed_ack else "off"]
    argv += ["--sender-pacing", "on" if spec.sender_pacing else "off"]
    argv += ["--target", repr(s["target"]), "--relative-to", s["relative_to"], "--samples", str(s["samples"])]
    for key, opt in (
        ("settle_s", "--settle-s"),
        ("sample_s", "--sample-s"),
        ("max_buffer_packets", "--max-buffer-packets"),
    ):
        if s[key] is not None:
            argv += [opt, repr(s[key])]
    argv += ["--resolution", repr(s["resolution"]), "--max-samples", str(s["max_samples"]), "--alpha", repr(s["alpha"])]
    argv += ["--precision", repr(s["precision"]), "--level", repr(s["level"])]
    argv += ["--sample-length", s["sample_length"]]
    if not s["first_guess"]:
        argv.append("--no-first-guess")
    argv += ["--tool", s["tool"], "--fidelity-s", repr(s["fidelity_s"])]
    return argv


def sweep_id(spec: SweepSpec, commit: str) -> str:
    """The remote sweep directory's name: the same command (settings and commit) finds it again."""
    blob = json.dumps({"spec": spec.to_dict(), "commit": commit}, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def assign(
    points: list[Point],
    machines: list[str],
    estimate: Callable[[int], float],
    runs_per_machine: int | None = None,
    order: list[str] | None = None,
) -> dict[str, list[Point]]:
    """Give each point to one of `machines` (labels of the machines ready to take new points).

    Split (runs_per_machine None): longest estimated search first, each to the machine with the
    least estimated work so far, so all finish near the same time (a search at 800 flows takes many
    times one at 2). Replicate: run r belongs to machine (r - 1) // runs_per_machine of `order` (all
    machines given, so each runs whole sweeps); a point whose machine is not ready goes to the least
    loaded ready one. Each machine's points come back in the sweep's own order (run-major).
    """
    if not machines:
        return {}
    load = dict.fromkeys(machines, 0.0)
    out: dict[str, list[Point]] = {m: [] for m in machines}
    rest = list(points)
    if runs_per_machine is not None:
        order = order or machines
        rest = []
        for n, r in points:
            owner = order[(r - 1) // runs_per_machine] if (r - 1) // runs_per_machine < len(order) else None
            if owner in out:
                out[owner].append((n, r))
                load[owner] += estimate(n)
            else:
                rest.append((n, r))
    for n, r in sorted(rest, key=lambda p: (-estimate(p[0]), p[1], p[0])):
        m = min(machines, key=lambda x: (load[x], machines.index(x)))
        out[m].append((n, r))
        load[m] += estimate(n)
    rank = {p: i for i, p in enumerate(points)}
    return {m: sorted(ps, key=rank.__getitem__) for m, ps in out.items()}


class BadPoint(Exception):
    """A pulled point that does not belong in the merged sweep (it is left out and reported)."""


# A point directory is 2-16 MB here (800 flows' cwnd traces the most); a pulled archive or its
# unpacked files beyond these are refused, not read: a remote machine is not trusted with our disk.
MAX_POINT_ARCHIVE_BYTES = 512 * 2**20
MAX_POINT_UNPACKED_BYTES = 2 * 2**30
MAX_POINT_MEMBERS = 10_000


def printable(text: str) -> str:
    """Text from another machine made safe to print: control characters (terminal escapes,
    carriage returns that overwrite a line) shown as \\xNN."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}" for c in text)


def sha256_of(path: Path) -> str:
    """The file's SHA-256, read in chunks (an archive is never held in memory whole)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def unpack_point(archive: Path, point: Point, into: Path) -> Path:
    """Check a pulled point's tarball member by member and unpack it into `into`: only regular files
    and directories, all under the point's own directory (a remote machine is not trusted to write
    anywhere else here)."""
    name = point_name(point)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = []
            total = 0
            for m in tar:  # read member by member: a bomb is stopped at the cap, not listed whole
                members.append(m)
                total += m.size
                if len(members) > MAX_POINT_MEMBERS or total > MAX_POINT_UNPACKED_BYTES:
                    raise BadPoint(
                        f"its archive unpacks to more than {MAX_POINT_MEMBERS} files or "
                        f"{MAX_POINT_UNPACKED_BYTES >> 20} MB"
                    )
            for m in members:
                parts = Path(m.name).parts
                if Path(m.name).is_absolute() or not parts or parts[0] != name or ".." in parts:
                    raise BadPoint(f"its archive holds {m.name!r}, outside {name}/")
                if not (m.isfile() or m.isdir()):
                    raise BadPoint(f"its archive holds {m.name!r}, which is not a plain file or directory")
            kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(into, members=members, **kw)
    except (tarfile.TarError, EOFError, OSError) as e:
        raise BadPoint(f"its archive does not unpack ({e})") from e
    return into / name


def check_point(d: Path, point: Point, commit: str) -> dict:
    """The unpacked point is the search it should be, made by the commit that was shipped."""
    r = read_finished(d / "result.json")
    if r is None or r.get("flows") != point[0] or "buffer_packets" not in r:
        raise BadPoint("its result.json is not a finished search of that N")
    made_by = (r.get("manifest") or {}).get("project_commit")
    if made_by != commit:
        raise BadPoint(f"it was made by commit {made_by!r}, not the shipped {commit}")
    return r


def merge_point(out: Path, unpacked: Path, point: Point) -> bool:
    """Move a checked point directory into the merged sweep in one rename (result.json and its data
    appear together). False if the sweep already has that point finished (it is not replaced)."""
    n, r = point
    target = point_dir(out, n, r)
    if finished(out, n, r):
        return False
    if target.exists():  # a failed or partial attempt made here before: the finished one replaces it
        shutil.rmtree(target)
    unpacked.rename(target)
    return True


def merged_manifest(old: dict | None, spec: SweepSpec, commit: str, by_machine: dict[str, dict]) -> dict:
    """The merged sweep's manifest.json: a local sweep's keys (spec, machine) plus `remote`: the
    commit shipped, and per machine its own machine manifest and the points merged from it."""
    remote = dict((old or {}).get("remote") or {})
    machines = {k: dict(v) for k, v in (remote.get("machines") or {}).items()}
    for label, info in by_machine.items():
        entry = machines.setdefault(label, {"machine": None, "points": []})
        if info.get("machine") is not None:
            entry["machine"] = info["machine"]
        entry["points"] = sorted(set(entry["points"]) | set(info.get("points", [])))
    first = next((e["machine"] for e in machines.values() if e["machine"] is not None), None)
    machine = (old or {}).get("machine") or first
    base = grown_manifest(old, spec) if old else {"spec": spec.to_dict()}  # keeps a record of added runs
    kept = {k: base[k] for k in ("spec", "runs_added") if k in base}
    return kept | {"machine": machine, "remote": {"commit": commit, "machines": machines}}


def write_manifest(out: Path, manifest: dict) -> None:
    write_json_atomic(out / "manifest.json", stamp(manifest, "sweep-manifest"))
