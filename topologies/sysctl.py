"""Sysctls: per-namespace ones die with their namespace; global ones are restored when the last run ends.

The first run to change a global sysctl writes its original value to STATE_DIR; the run that ends
last (no other live run recorded it) writes the originals back and removes that file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from bufsize.topologies import ledger
from bufsize.topologies.safefiles import write_atomic

# The idle vCPUs' poll before they halt, on a KVM guest whose cpuidle driver is haltpoll: a kernel
# module parameter, not a sysctl, kept under this name beside the sysctls (ledger.ALLOWED_GLOBAL_SYSCTLS)
# so that it is recorded, restored and cleaned up the same way.
HALT_POLL = "haltpoll.guest_halt_poll_ns"
MODULE_PARAMETERS = {HALT_POLL: Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")}


def _proc_path(name: str) -> Path:
    return MODULE_PARAMETERS.get(name) or Path("/proc/sys") / name.replace(".", "/")


def exists(name: str) -> bool:
    return _proc_path(name).exists()


def read(name: str) -> str:
    return _proc_path(name).read_text().strip()


def write(name: str, value: str) -> None:
    _proc_path(name).write_text(value)


def _originals_path() -> Path:
    return ledger.STATE_DIR / ledger.GLOBAL_SYSCTLS


# What an original value may look like: a number, or a list of congestion control names.
VALUE = re.compile(r"[0-9]{1,12}|[a-z0-9_]{1,32}( [a-z0-9_]{1,32}){0,31}")


def checked_originals() -> tuple[dict[str, str], list[str]]:
    """The originals file, keeping only allowed names with plausible values; and what was refused.

    The file must be root's and not writable by others (ledger.read_state_file), since what it
    holds is written into /proc/sys."""
    path = _originals_path()
    if not path.exists():
        return {}, []
    try:
        data = json.loads(ledger.read_state_file(path))
    except (ledger.LedgerError, ValueError) as e:
        return {}, [f"skipped {path}: {e}; no sysctl restored from it"]
    if not isinstance(data, dict):
        return {}, [f"skipped {path}: not a JSON object; no sysctl restored from it"]
    good, refused = {}, []
    for name, value in data.items():
        if name not in ledger.ALLOWED_GLOBAL_SYSCTLS:
            refused.append(f"sysctl {name!r} in {path} not restored: not one a run may change")
        elif not isinstance(value, str) or not VALUE.fullmatch(value):
            refused.append(f"sysctl {name} in {path} not restored: implausible value {value!r}")
        else:
            good[name] = value
    return good, refused


def load_originals() -> dict[str, str]:
    return checked_originals()[0]


def _load_originals() -> dict[str, str]:
    return load_originals()


def _set_global(state: ledger.RunState, name: str, value: str) -> None:
    """Change a global sysctl on the allow-list for the duration of the run; the caller holds the state lock."""
    if name not in ledger.ALLOWED_GLOBAL_SYSCTLS:
        raise ValueError(f"{name} is not a global sysctl a run may change")
    originals = _load_originals()
    if name not in originals:
        originals[name] = read(name)
        write_atomic(_originals_path(), json.dumps(originals, indent=1))
    if name not in state.global_sysctls:
        state.global_sysctls.append(name)
        state.save()
    write(name, value)


def raise_global(state: ledger.RunState, name: str, minimum: int) -> tuple[int, int]:
    """Make a numeric global sysctl at least `minimum`, never lowering it; returns (the machine's own
    value, the value now), both read under the lock.

    If another live run already raised it, this run records it too, so the first of the two to end
    does not restore the original under the other; the machine's own value is then the original that
    run saved, not the raised one. The check and the change are under one hold of the state lock:
    another run's teardown cannot restore the original between them.
    """
    with ledger.state_lock():
        originals = _load_originals()
        current = int(read(name))
        if current < minimum or name in originals:
            _set_global(state, name, str(max(current, minimum)))
        own = int(originals[name]) if name in originals else current
        return own, int(read(name))


def allow_congestion_control(state: ledger.RunState, cc: str) -> None:
    """Add `cc` to the congestion controls namespaces may use (read and change under one lock, so
    two runs adding different ones keep both)."""
    name = "net.ipv4.tcp_allowed_congestion_control"
    with ledger.state_lock():
        allowed = read(name).split()
        if cc not in allowed:
            _set_global(state, name, " ".join([*allowed, cc]))


def _restore(names: set[str]) -> tuple[list[str], list[str]]:
    originals, refused = checked_originals()
    if refused:  # a file that is not what runs write: leave it (and /proc/sys) alone
        return [], refused
    done = []
    for name in sorted(names & originals.keys() & set(ledger.ALLOWED_GLOBAL_SYSCTLS)):
        write(name, originals.pop(name))
        done.append(f"sysctl {name} restored to {read(name)}")
    if done:
        if originals:
            write_atomic(_originals_path(), json.dumps(originals, indent=1))
        else:
            _originals_path().unlink(missing_ok=True)
    return done, []


def _still_needed(exclude: str | None = None) -> set[str]:
    """Sysctls live runs recorded; all of them while a refused ledger's owner may be alive (it
    could be a run of another version whose ledger this one cannot read)."""
    needed = {n for s in ledger.live_runs(exclude=exclude) for n in s.global_sysctls}
    if ledger.refused_ledger_may_be_live():
        needed |= set(ledger.ALLOWED_GLOBAL_SYSCTLS)
    return needed


def release_globals(state: ledger.RunState) -> list[str]:
    """Called under the state lock when a run ends: restore what no other live run still needs."""
    return _restore(set(state.global_sysctls) - _still_needed(exclude=state.run_id))[0]


def restore_orphaned_globals() -> tuple[list[str], list[str]]:
    """`bufsize clean`: restore what no live run needs; (what was restored, what was refused and why)."""
    return _restore(set(load_originals()) - _still_needed())
