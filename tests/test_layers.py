"""Layers point one way: topologies (the emulation core) <- monitors <- buffersizing, and no import circle.

Every import counts, also those inside functions: an import deferred to call time is still a
dependency, and hiding a circle that way is what this test is here to stop.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("topologies", "monitors", "buffersizing")
# What each layer may import from the project's packages.
ALLOWED = {"topologies": {"topologies"}, "monitors": {"topologies", "monitors"}, "buffersizing": set(PACKAGES)}


def module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


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
        for n in names:
            if n.split(".")[0] in PACKAGES and (REPO / (n.replace(".", "/") + ".py")).exists() or n in PACKAGES:
                out.add(n)
    return out


def graph() -> dict[str, set[str]]:
    return {module_name(p): project_imports(p) for pkg in PACKAGES for p in sorted((REPO / pkg).glob("*.py"))}


def wrong_way(g: dict[str, set[str]]) -> list[str]:
    return [
        f"{mod} imports {dep}"
        for mod, deps in g.items()
        for dep in deps
        if dep.split(".")[0] not in ALLOWED[mod.split(".")[0]]
    ]


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    found: list[list[str]] = []

    def visit(mod: str, path: list[str]) -> None:
        state[mod] = 1
        for dep in sorted(g.get(mod, ())):
            if dep == mod or dep in PACKAGES:  # a package's __init__ is a leaf here
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


def test_each_layer_imports_only_itself_and_the_layers_below():
    wrong = wrong_way(graph())
    assert not wrong, "\n".join(wrong)


def test_no_import_circle():
    found = circles(graph())
    assert not found, "\n".join(" -> ".join(c) for c in found)


def test_the_checks_find_a_planted_circle_and_a_wrong_way_import():
    g = graph()
    assert "topologies.ledger" in g["topologies.sysctl"]  # function-level and aliased imports are seen
    planted = g | {"topologies.ledger": g["topologies.ledger"] | {"topologies.sysctl", "monitors.recorder"}}
    assert ["topologies.ledger", "topologies.sysctl", "topologies.ledger"] in circles(planted)
    assert "topologies.ledger imports monitors.recorder" in wrong_way(planted)


def test_cli_is_short_and_no_bench_imports_it():
    assert len((REPO / "buffersizing" / "cli.py").read_text().splitlines()) < 300
    for p in sorted((REPO / "bench").glob("*.py")):
        assert "buffersizing.cli" not in project_imports(p), p.name
