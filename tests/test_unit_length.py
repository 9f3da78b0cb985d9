"""The code's units stay readable: a function of the toolkit over 80 lines says in its docstring or
its first comment why it is one function (docs/development.md, Architecture), so a long one is
a decision, not an accident."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LIMIT = 80


def long_functions() -> list[tuple[str, int, str]]:
    """(function, lines, what it says about being one) for every function over LIMIT lines."""
    found = []
    for root in ("buffersizing", "topologies", "monitors"):
        for path in sorted((REPO / root).rglob("*.py")):
            text = path.read_text()
            lines = text.splitlines()
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = node.end_lineno - node.lineno + 1
                    if length > LIMIT:
                        head = " ".join(lines[node.lineno - 1 : node.lineno + 12])
                        said = (ast.get_docstring(node) or "") + " " + head
                        found.append((f"{path.relative_to(REPO)}:{node.name}", length, " ".join(said.split())))
    return found


def test_every_function_over_80_lines_says_why_it_is_one():
    unexplained = [(name, n) for name, n, said in long_functions() if "one function" not in said.lower()]
    assert not unexplained, f"functions over {LIMIT} lines with no word on why each is one: {unexplained}"


def test_the_check_finds_a_long_function():
    """The check itself can fail: it sees a function longer than the limit in this repository."""
    assert long_functions(), "no function over the limit was found at all: is the walk reading the code?"
