"""The package's floors: a part of `tether/` imports only from its own floor or the floors below, and no two
parts import each other (even under TYPE_CHECKING). The data flows up: records, then calls, then what
learns from them, then the commands that assemble it all."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

TETHER = Path(__file__).resolve().parent.parent / "tether"

FLOORS: list[set[str]] = [
    # ground: shared contracts and small helpers
    {"contracts", "errors", "filemodes", "limits", "models", "prompts", "registry", "sampling", "teacher"},
    {"store", "engines", "ray"},  # records, the built-in engine, the Ray cluster and transfers
    {"gateway", "runner", "tracing", "adapters", "project"},  # calls recorded; records turned to samples
    {"policy_server", "algorithms", "rewards"},  # serving, advantages, reward sources
    {"dashboard", "compose", "stack"},  # the servers a command runs
    {"trainer"},  # the loop
    {"cli"},  # commands
]


def part_of(module: str) -> str:
    return module.split(".")[1] if "." in module else "__init__"


def imports() -> dict[tuple[str, str], list[str]]:
    """(importing part, imported part) -> where, over every file of the package."""
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in TETHER.rglob("*.py"):
        relative = path.relative_to(TETHER.parent).with_suffix("")
        module = ".".join(relative.parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                if name.startswith("tether.") and part_of(name) != part_of(module):
                    found[(part_of(module), part_of(name))].append(f"{relative}:{node.lineno}")
    return found


def floor_of(part: str) -> int:
    return next(i for i, floor in enumerate(FLOORS) if part in floor)


def test_every_part_has_a_floor() -> None:
    parts = {p.stem if p.is_file() else p.name for p in TETHER.iterdir() if p.suffix == ".py" or p.is_dir()}
    parts -= {"__init__", "__pycache__"}
    placed = set().union(*FLOORS)
    assert parts - placed == set(), "give each new part of tether/ a floor in FLOORS"
    assert placed - parts == set(), "FLOORS names parts that are gone"


def test_no_import_runs_up_a_floor() -> None:
    upward = [
        f"{a} (floor {floor_of(a)}) imports {b} (floor {floor_of(b)}) at {', '.join(where[:3])}"
        for (a, b), where in sorted(imports().items())
        if a != "__init__" and floor_of(b) > floor_of(a)
    ]
    assert upward == []


def test_no_two_parts_import_each_other() -> None:
    edges: dict[str, set[str]] = defaultdict(set)
    for a, b in imports():
        if a != "__init__":
            edges[a].add(b)
    circles = []
    for start in list(edges):
        seen, todo = set(), list(edges[start])
        while todo:
            part = todo.pop()
            if part == start:
                circles.append(start)
                break
            if part not in seen:
                seen.add(part)
                todo.extend(edges.get(part, ()))
    assert circles == [], f"parts on an import circle: {sorted(circles)}"
