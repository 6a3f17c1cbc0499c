"""The layer contract: every import inside tinykit runs down the floors, never up or sideways.

A room is a top-level package (`tinykit/model/`) or module (`tinykit/_files.py`). Rooms on one
floor are independent; a room may import itself and any room on a lower floor. Imports inside
functions count too (a lazy import that runs up is still an upward dependency). CONTRIBUTING.md
explains the order; a change that needs an upward import moves the shared piece down instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tinykit"

# Top floor first. `__init__` is the package face (tinykit/__init__.py, lazy re-exports only).
FLOORS: list[set[str]] = [
    {"__main__"},
    {"cli"},
    {"pytest_plugin", "__init__"},
    {"bisect", "standins"},
    {"artifacts"},
    {"memory", "dataset"},
    {"strategies", "slice", "coverage"},
    {"model"},
    {"frontend"},
    {"tokenizer"},
    {"numerics", "source"},
    {"repro", "distributed", "hub"},
    {"testing", "_child", "_files", "_suggest", "_recipes", "_procs"},
    {
        "_devices",
        "_versions",
        "errors",
        "_progress",
        "_deprecate",
        "_import_hooks",
        "_values",
        "_configs",
    },
]

# Upward imports tolerated while being moved out: none left (keep it that way).
IGNORED: set[str] = set()

FLOOR_OF = {room: depth for depth, rooms in enumerate(FLOORS) for room in rooms}


def _room(parts: list[str]) -> str:
    """The room of a dotted module path inside tinykit (['tinykit', 'model', 'build'] -> 'model')."""
    if len(parts) == 1:
        return "__init__"
    return parts[1].removesuffix(".py")


def _imports(path: Path) -> list[tuple[int, list[str]]]:
    """(line, dotted target) of every tinykit import in a file, module level and inside functions."""
    module = ["tinykit", *path.relative_to(PACKAGE).with_suffix("").parts]
    if module[-1] == "__init__":
        module = module[:-1]
    package = module if path.name == "__init__.py" else module[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name.split(".")) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = [*base, *(node.module.split(".") if node.module else [])]
            if node.module is None or target == ["tinykit"]:
                # `from tinykit import x` / `from . import x`: each name may be a room
                found += [(node.lineno, [*target, a.name]) for a in node.names]
            else:
                found.append((node.lineno, target))
    return [(line, target) for line, target in found if target[0] == "tinykit"]


def upward_imports() -> list[str]:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        here = _room(["tinykit", *path.relative_to(PACKAGE).parts])
        for line, target in _imports(path):
            there = _room(target)
            if there == here:
                continue
            if there not in FLOOR_OF:
                # `from tinykit import make_tiny` reads the package face: a name, not a room
                there = "__init__"
            where = f"{path.relative_to(PACKAGE.parent)} -> {'.'.join(target)}"
            if FLOOR_OF[there] <= FLOOR_OF[here] and where not in IGNORED:
                bad.append(f"{where} (line {line}: {here} may not import {there})")
    return bad


def test_every_room_has_a_floor():
    rooms = {
        _room(["tinykit", p.name])
        for p in PACKAGE.iterdir()
        if p.suffix == ".py" or (p / "__init__.py").exists()
    }
    assert rooms <= set(FLOOR_OF), f"put these in FLOORS: {sorted(rooms - set(FLOOR_OF))}"


def test_imports_run_down_the_floors():
    assert upward_imports() == []
