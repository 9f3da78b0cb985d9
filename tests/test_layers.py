"""Layers point one way: topologies (the emulation core) <- monitors <- buffersizing, and no import circle.

Inside buffersizing the packages stand on floors (FLOORS, bottom up): a package imports its own
modules and the packages of the floors below it, never one beside it or above it.

In the import namespace these are bufsize.topologies, bufsize.monitors and the rest of bufsize.

Every import counts, also those inside functions: an import deferred to call time is still a
dependency, and hiding a circle that way is what this test is here to stop.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The layers, bottom up, as folders of the layout and as names in the one import namespace.
FOLDERS = {"topologies": "bufsize.topologies", "monitors": "bufsize.monitors", "buffersizing": "bufsize"}
# What each layer may import from the project's packages.
ALLOWED = {
    "topologies": {"topologies"},
    "monitors": {"topologies", "monitors"},
    "buffersizing": {"topologies", "monitors", "buffersizing"},
}


def layer(module: str) -> str:
    """The layer of a dotted name in the bufsize namespace."""
    for folder in ("topologies", "monitors"):
        if module == FOLDERS[folder] or module.startswith(FOLDERS[folder] + "."):
            return folder
    return "buffersizing"


def source_of(module: str) -> Path | None:
    """The file that a dotted name in the bufsize namespace is, or None when it is no module of ours."""
    if module != "bufsize" and not module.startswith("bufsize."):
        return None
    folder = FOLDERS[layer(module)]
    rel = module[len(folder) + 1 :].replace(".", "/") if module != folder else ""
    base = REPO / next(k for k, v in FOLDERS.items() if v == folder) / rel
    for candidate in (base.with_suffix(".py") if rel else None, base / "__init__.py"):
        if candidate is not None and candidate.exists():
            return candidate
    return None


def module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join([FOLDERS[parts[0]], *parts[1:]])


def project_imports(path: Path) -> set[str]:
    """Modules of the project that `path` imports (a package import names its __init__ or the submodule)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg import mod` imports pkg.mod when that is a module, else a name from pkg.
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        out.update(n for n in names if source_of(n) is not None)
    return out


def packages() -> set[str]:
    return {module_name(p.parent / "__init__.py") for f in FOLDERS for p in (REPO / f).rglob("__init__.py")}


def graph() -> dict[str, set[str]]:
    return {module_name(p): project_imports(p) for f in FOLDERS for p in sorted((REPO / f).rglob("*.py"))}


def wrong_way(g: dict[str, set[str]]) -> list[str]:
    return [f"{mod} imports {dep}" for mod, deps in g.items() for dep in deps if layer(dep) not in ALLOWED[layer(mod)]]


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    leaves = packages()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    found: list[list[str]] = []

    def visit(mod: str, path: list[str]) -> None:
        state[mod] = 1
        for dep in sorted(g.get(mod, ())):
            if dep == mod or dep in leaves:  # a package's __init__ is a leaf here
                continue
            if state.get(dep) == 1:
                found.append([*path[path.index(dep) :], dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[mod] = 2

    for mod in g:
        if mod not in state:
            visit(mod, [mod])
    return found


# The floors of buffersizing, bottom up. "bufsize" is the package's own __init__ (its version).
FLOORS = [
    {"bufsize", "theory", "traffic", "mininet"},  # models, traffic sources, Mininet's view of the dumbbell
    {"scaffold"},  # what every experiment shares: the run, its result directory and manifest
    {"longlived"},  # the long-lived flows' experiments: measure, search, sweep, the report
    {"shortflows", "course", "remote"},  # built on the long-lived ones
    {"sim"},  # the twin's drivers, which reuse both families' rules and reports
    {"cli"},  # parse and dispatch
]


def package_of(module: str) -> str | None:
    """The buffersizing package a module belongs to ("bufsize" for the root), None outside buffersizing."""
    if layer(module) != "buffersizing":
        return None
    parts = module.split(".")
    if len(parts) >= 2 and (REPO / "buffersizing" / parts[1]).is_dir():
        return parts[1]
    return "bufsize"


def floor(package: str) -> int:
    return next(i for i, f in enumerate(FLOORS) if package in f)


def off_floor(g: dict[str, set[str]]) -> list[str]:
    """Imports between buffersizing's packages that go up or sideways."""
    bad = []
    for mod, deps in g.items():
        here = package_of(mod)
        for dep in deps:
            there = package_of(dep)
            if here is None or there is None or there == here or there == "bufsize":
                continue
            if floor(there) >= floor(here):
                bad.append(f"{mod} ({here}, floor {floor(here)}) imports {dep} ({there}, floor {floor(there)})")
    return bad


def test_every_package_of_buffersizing_has_a_floor_and_no_loose_module_is_left():
    named = set().union(*FLOORS)
    folders = {p.name for p in (REPO / "buffersizing").iterdir() if (p / "__init__.py").exists()}
    assert folders | {"bufsize"} == named, (folders | {"bufsize"}) ^ named
    loose = sorted(p.name for p in (REPO / "buffersizing").glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules outside any floor's package: {loose}"


def test_buffersizing_imports_only_down_its_floors():
    bad = off_floor(graph())
    assert not bad, "\n".join(bad)


def test_the_floor_check_finds_an_upward_and_a_sideways_import():
    g = graph()
    planted = g | {
        "bufsize.longlived.report": g["bufsize.longlived.report"] | {"bufsize.shortflows.plots"},
        "bufsize.scaffold.experiment": g["bufsize.scaffold.experiment"] | {"bufsize.cli.options"},
        "bufsize.course.check": g["bufsize.course.check"] | {"bufsize.remote.plan"},
    }
    found = "\n".join(off_floor(planted))
    assert "bufsize.longlived.report (longlived, floor 2) imports bufsize.shortflows.plots" in found
    assert "bufsize.scaffold.experiment (scaffold, floor 1) imports bufsize.cli.options" in found
    assert "bufsize.course.check (course, floor 3) imports bufsize.remote.plan (remote, floor 3)" in found


def test_each_layer_imports_only_itself_and_the_layers_below():
    wrong = wrong_way(graph())
    assert not wrong, "\n".join(wrong)


def test_no_import_circle():
    found = circles(graph())
    assert not found, "\n".join(" -> ".join(c) for c in found)


def test_the_checks_find_a_planted_circle_and_a_wrong_way_import():
    g = graph()
    assert "bufsize.topologies.ledger" in g["bufsize.topologies.sysctl"]  # function-level and aliased imports are seen
    planted = g | {
        "bufsize.topologies.ledger": g["bufsize.topologies.ledger"]
        | {"bufsize.topologies.sysctl", "bufsize.monitors.recorder"}
    }
    assert ["bufsize.topologies.ledger", "bufsize.topologies.sysctl", "bufsize.topologies.ledger"] in circles(planted)
    assert "bufsize.topologies.ledger imports bufsize.monitors.recorder" in wrong_way(planted)


def test_cli_is_short_and_no_bench_imports_it():
    assert len((REPO / "buffersizing" / "cli" / "__init__.py").read_text().splitlines()) < 300
    for p in sorted((REPO / "bench").glob("*.py")):
        assert not any(m == "bufsize.cli" or m.startswith("bufsize.cli.") for m in project_imports(p)), p.name


def test_every_module_is_in_a_listed_package_and_nothing_imports_the_old_names():
    # pyproject.toml lists the packages by hand (package-dir maps folders to names): a new subfolder
    # left out would be missing from an installed copy, and an import of a folder's own name (the
    # names before the bufsize namespace) works only by accident of the working directory.
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    assert packages() <= listed, packages() - listed
    for p in (p for f in FOLDERS for p in (REPO / f).rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom) and node.__dict__.get("level", 0) == 0:
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert not any(n.split(".")[0] in FOLDERS for n in names), f"{p}: {names}"
