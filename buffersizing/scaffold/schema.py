"""The versioned JSON Schema of the files a run writes, and the check of a results directory against it.

result.json (one run, its keys by `kind`), a sweep's manifest.json and the machine manifest inside
both are described by the JSON Schema documents in schemas/. Every writer stamps SCHEMA_VERSION
into the document (stamp) and `bufsize validate` checks a directory's files. Checking happens in
the tests and on demand, not while writing: a finished measurement is saved even if a key is off,
since losing it would be worse than a file that `validate` then names.

jsonschema (the reference implementation) does the checking: draft 2020-12 and $ref across files,
which a hand-written check would have to re-implement.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from bufsize.scaffold.resultdir import write_json_atomic

SCHEMA_VERSION = 1
SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
SCHEMAS = ("result", "sweep-manifest", "machine")
# A results file larger than this is not one the toolkit wrote (the largest committed result.json
# is a few MB: every probe's samples), and reading it whole could exhaust memory.
MAX_FILE_BYTES = 64 * 1024 * 1024


# Set (to 1) by the test suite: every document a writer stamps is then checked against its schema
# on the spot, and a mismatch fails the test that wrote it. Off otherwise, so that a finished
# measurement is never lost over a key: `bufsize validate` names it afterwards.
CHECK_ON_WRITE = "BUFSIZE_CHECK_SCHEMA"


class SchemaMismatch(AssertionError):
    """A document the toolkit wrote does not follow its own schema (raised only under CHECK_ON_WRITE)."""


def stamp(doc: dict, name: str) -> dict:
    """`doc` with the schema version first, as every writer of a result or manifest saves it; `name`
    is the schema it follows (SCHEMAS)."""
    out = {"schema_version": SCHEMA_VERSION} | {k: v for k, v in doc.items() if k != "schema_version"}
    if os.environ.get(CHECK_ON_WRITE) == "1":
        found = problems_of(json.loads(json.dumps(out, default=str)), name)
        if found:
            raise SchemaMismatch(f"a {name} document off its schema: " + "; ".join(found[:5]))
    return out


@cache
def schema(name: str) -> dict:
    return json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())


@cache
def _validator(name: str):  # noqa: ANN202 (jsonschema's classes carry no stubs)
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    registry = Registry().with_resources((f"{n}.schema.json", Resource.from_contents(schema(n))) for n in SCHEMAS)
    return Draft202012Validator(schema(name), registry=registry)


def problems_of(doc: object, name: str) -> list[str]:
    """One line per way `doc` departs from schema `name`: where (a key path) and what."""
    out = []
    for e in sorted(_validator(name).iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path]):
        where = "/".join(str(p) for p in e.absolute_path) or "(top)"
        out.append(f"{where}: {e.message if len(e.message) <= 300 else e.message[:300] + '...'}")
    return out


def read_json_file(path: Path) -> object:
    """A JSON file that must be a regular file of a sane size; ValueError says why not."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a FIFO must not block the check
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if st.st_size > MAX_FILE_BYTES:
            raise ValueError(f"{st.st_size} bytes, more than a result holds ({MAX_FILE_BYTES})")
        data = f.read(MAX_FILE_BYTES + 1)
    try:
        return json.loads(data)
    except RecursionError as e:
        raise ValueError("nested too deeply") from e


def schema_for(path: Path, doc: object) -> str | None:
    """Which schema a file follows, from its name and place: None for a file no schema describes."""
    if path.name == "result.json":
        return "result"
    if path.name == "manifest.json" and isinstance(doc, dict) and "spec" in doc:
        return "sweep-manifest"
    return None


def files_under(root: Path) -> Iterator[Path]:
    """Every result.json and sweep manifest.json at or below `root`, never through a link."""
    if root.is_file():
        yield root
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            if name in ("result.json", "manifest.json"):
                yield Path(dirpath) / name


def check_file(path: Path) -> list[str]:
    """`path: where: what` for each problem of one file (none: it follows its schema)."""
    try:
        doc = read_json_file(path)
    except (OSError, ValueError) as e:
        return [f"{path}: (file): {e}"]
    name = schema_for(path, doc)
    if name is None:
        return [] if path.name == "manifest.json" else [f"{path}: (file): no schema describes this file"]
    return [f"{path}: {p}" for p in problems_of(doc, name)]


def check_tree(root: Path) -> tuple[int, list[str]]:
    """How many files were checked below `root`, and their problems."""
    checked, found = 0, []
    for path in files_under(root):
        checked += 1
        found += check_file(path)
    return checked, found


def legacy_kind(doc: dict) -> str:
    """The kind of a result written before results named it: only searches and measurements were."""
    return "search" if "probes" in doc else "measure"


def migrate_file(path: Path) -> bool:
    """Stamp a result or sweep manifest written before the schema (no schema_version) with version 1,
    and a result without `kind` with the kind its keys show; every other key and value is kept as it
    was. True where the file was rewritten."""
    doc = read_json_file(path)
    if not isinstance(doc, dict) or "schema_version" in doc or schema_for(path, doc) is None:
        return False
    if path.name == "result.json" and "kind" not in doc:
        doc = {"kind": legacy_kind(doc)} | doc
    write_json_atomic(path, stamp(doc, schema_for(path, doc) or "result"))
    return True
