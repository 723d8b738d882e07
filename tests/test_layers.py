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
    {
        "contracts",
        "errors",
        "filemodes",
        "limits",
        "models",
        "periodic",
        "prompts",
        "registry",
        "sampling",
        "teacher",
        "text",
    },
    {"store", "engines", "ray"},  # records, the built-in engine, the Ray cluster and transfers
    {"gateway", "runner", "tracing", "adapters", "project"},  # calls recorded; records turned to samples
    {
        "policy_server",
        "algorithms",
        "rewards",
        "config",
        "prompt_search",
        "deploy",
    },  # serving, advantages, rewards, settings, canaries
    {"dashboard", "compose", "stack", "learner", "curriculum"},  # servers a command runs, the update, tasks
    {"placement"},  # where the parts run: this process or Ray
    {"trainer"},  # the loop
    {"experiment"},  # a command's parts opened from its settings tree; the Python API
    {"cli"},  # commands: flags into a settings tree
]


def part_of(module: str) -> str:
    return module.split(".")[1] if "." in module else "__init__"


def imports() -> dict[tuple[str, str], list[str]]:
    """(importing part, imported part) -> where, over every file of the package."""
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in TETHER.rglob("*.py"):
        relative = path.relative_to(TETHER.parent).with_suffix("")
        module = ".".join(relative.parts).removesuffix(".__init__")
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for name, line in imported_modules(path.read_text(), package):
            if name.startswith("tether.") and part_of(name) != part_of(module):
                found[(part_of(module), part_of(name))].append(f"{relative}:{line}")
    return found


def imported_modules(source: str, package: str) -> list[tuple[str, int]]:
    """The absolute names of the modules `source` (a module of `package`) imports, with their lines: by
    import statements, relative ones resolved, and by `importlib.import_module` or `__import__` called
    with a literal name (an import by string is an import all the same)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            found.append((resolve("." * node.level + (node.module or ""), package), node.lineno))
        elif isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.Call) and (name := import_by_string(node)) is not None:
            found.append((resolve(name, literal_keyword(node, "package") or package), node.lineno))
    return found


def import_by_string(call: ast.Call) -> str | None:
    """The literal module name a call to `import_module` (however reached) or `__import__` imports."""
    func = call.func
    called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    if called not in ("import_module", "__import__"):
        return None
    first = call.args[0] if call.args else None
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return literal_keyword(call, "name")


def literal_keyword(call: ast.Call, name: str) -> str | None:
    for keyword in call.keywords:
        if keyword.arg == name and isinstance(keyword.value, ast.Constant):
            return str(keyword.value.value)
    return None


def resolve(name: str, package: str) -> str:
    """`name` made absolute: `..x` from package `tether.a.b` is `tether.a.x`."""
    level = len(name) - len(name.lstrip("."))
    if not level:
        return name
    base = package.split(".")[: len(package.split(".")) - level + 1]
    return ".".join([*base, name[level:]] if name[level:] else base)


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


def test_imports_by_string_and_relative_imports_are_seen() -> None:
    """The checks above see every way a part can reach another: statements, relative or not, and a
    module named by a literal string to importlib or `__import__`."""
    source = """
import importlib
from importlib import import_module
import tether.store
from tether.gateway import app
from ..trainer import loop
from . import sibling
importlib.import_module("tether.trainer.loop")
import_module(".policy", package="tether.trainer")
__import__("tether.cli.main")
__import__(name="tether.dashboard")
importlib.import_module(computed)
"""
    assert sorted(name for name, _ in imported_modules(source, "tether.runner")) == sorted(
        [
            "importlib",
            "importlib",
            "tether.store",
            "tether.gateway",
            "tether.trainer",
            "tether.runner",
            "tether.trainer.loop",
            "tether.trainer.policy",
            "tether.cli.main",
            "tether.dashboard",
        ]
    )


def test_the_command_line_namespace_stays_in_the_cli() -> None:
    """Only `tether/cli/` reads parsed flags: below it, parts take settings and configs. The one other
    parser is the scripted teacher's own program (`tether/teacher.py`), whose flags stay in its main."""
    readers, parsers = [], []
    for path in TETHER.rglob("*.py"):
        relative = path.relative_to(TETHER.parent)
        if relative.parts[1] == "cli":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.arg) and node.annotation is not None:
                if "Namespace" in ast.unparse(node.annotation):
                    readers.append(f"{relative}:{node.lineno}")
            if isinstance(node, ast.Import) and any(alias.name == "argparse" for alias in node.names):
                parsers.append(str(relative))
    assert readers == []
    assert parsers == ["tether/teacher.py"]
