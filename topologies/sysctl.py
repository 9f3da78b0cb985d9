"""Sysctls: per-namespace ones die with their namespace; global ones are restored when the last run ends.

The first run to change a global sysctl writes its original value to STATE_DIR; the run that ends
last (no other live run recorded it) writes the originals back and removes that file.
"""

from __future__ import annotations

import json
from pathlib import Path

from topologies import ledger


def _proc_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def read(name: str) -> str:
    return _proc_path(name).read_text().strip()


def write(name: str, value: str) -> None:
    _proc_path(name).write_text(value)


def _originals_path() -> Path:
    return ledger.STATE_DIR / ledger.GLOBAL_SYSCTLS


def _load_originals() -> dict[str, str]:
    try:
        return json.loads(_originals_path().read_text())
    except (OSError, ValueError):
        return {}


def set_global(state: ledger.RunState, name: str, value: str) -> None:
    """Change a global sysctl for the duration of the run."""
    with ledger.state_lock():
        originals = _load_originals()
        if name not in originals:
            originals[name] = read(name)
            _originals_path().write_text(json.dumps(originals, indent=1))
        if name not in state.global_sysctls:
            state.global_sysctls.append(name)
            state.save()
        write(name, value)


def raise_global(state: ledger.RunState, name: str, minimum: int) -> None:
    """Make a numeric global sysctl at least `minimum`, never lowering it.

    If another live run already raised it, this run records it too, so the first of the two to end
    does not restore the original under the other.
    """
    with ledger.state_lock():
        raised_by_another = name in _load_originals()
    current = int(read(name))
    if current < minimum or raised_by_another:
        set_global(state, name, str(max(current, minimum)))


def _restore(names: set[str]) -> list[str]:
    originals = _load_originals()
    done = []
    for name in sorted(names & originals.keys()):
        write(name, originals.pop(name))
        done.append(f"sysctl {name} restored to {read(name)}")
    if originals:
        _originals_path().write_text(json.dumps(originals, indent=1))
    else:
        _originals_path().unlink(missing_ok=True)
    return done


def release_globals(state: ledger.RunState) -> list[str]:
    """Called under the state lock when a run ends: restore what no other live run still needs."""
    still_needed = {n for s in ledger.live_runs(exclude=state.run_id) for n in s.global_sysctls}
    return _restore(set(state.global_sysctls) - still_needed)


def restore_orphaned_globals() -> list[str]:
    still_needed = {n for s in ledger.live_runs() for n in s.global_sysctls}
    return _restore(set(_load_originals()) - still_needed)
