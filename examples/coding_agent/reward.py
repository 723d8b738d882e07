"""The evaluator: 1 if the agent's change fixes the bug, run against the hidden tests in a sandbox.

`fixed(task, output)` rebuilds the agent's final working tree (the task's working copy with the agent's
patch applied: the patch is the last line the agent printed, `{"patch": "..."}`), restores the original
test files and test configuration from the task's `reference.tests`, and runs the tests under bubblewrap
(`tether.runner.sandbox.BwrapSandbox`: no network, the file system read-only but its own folder, the
project hidden, CPU, memory and process limits, and a wall-clock limit). The reward is 1 when every test
of `reference.fail_to_pass` (failing on the buggy library) and of `reference.pass_to_pass` (passing on the
original) passes, else 0. Also reported: `fail_to_pass` and `pass_to_pass`, the fractions that pass, and
`tampered`.

A patch that touches the tests or what pytest reads besides them (a file under a `tests` folder, a test
file of the library, `conftest.py`, `pytest.ini`, `tox.ini`, `setup.cfg`, `pyproject.toml`,
`sitecustomize.py`, `usercustomize.py`, a `.pth` file) scores 0 and `tampered` 1, whatever it fixes. So
does a patch that does not apply, or a path outside the tree. No patch, or an empty one, scores 0 without
running anything (the tests fail on the buggy library by construction).

A test counts as passing only when the test process says so *and* every assertion it ran saw what it saw
on the original library. The agent's code runs in the test process, so that process's report is the
agent's to write: it can patch pytest or the runner, rewrite the results file, exit early with status 0.
What it cannot write without the fix is the fingerprint of each assertion that held (testrun.py: the
values compared, hashed), which is compared here, outside it, with the fingerprints of two runs of the
original library (the working copy with `reference.original` in place of `reference.buggy`), made once
per task in the same sandbox and kept in memory. An assertion whose fingerprint differs between the two
original runs (a value drawn at random, a hash of an object) is left out of the comparison; a test that
ran a different number of assertions in them, or none, is taken on the test process's word. Also reported:
`unverified`, 1 when a test said it passed but its assertions did not match (a forged report, or a fix
that behaves differently from the original where the tests look).

testrun.py is read once, when this file is loaded, and checked against `RUNNER_SHA256`; each evaluation
writes that copy into the sandbox and never reads the file again, so an agent that rewrites it (one run
without the sandbox) changes no later evaluation of this process, and the next process refuses to load.

`CODING_EVAL_SANDBOX=none` runs the tests without the sandbox: only for machines without bubblewrap and
agents you trust, since the agent's code then runs with all of Tether's rights.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import os
import re
import shlex
import sys
import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from tether.runner.agents import LLM, CommandAgent
from tether.runner.sandbox import (
    Sandbox,
    SandboxLimits,
    SandboxOptions,
    open_sandbox,
    project_hide,
)

HERE = Path(__file__).resolve().parent
RUNNER = HERE / "testrun.py"
RUNNER_SHA256 = "8d1cd64a5e09627c653498ebc3cc1bdf6a2808c4f45a9d3730d441d018441a69"
RESULTS_LIMIT = 32 << 20  # bytes of a results file read back: the test process writes it
EVAL_TIMEOUT_S = 300.0
LIMITS = SandboxLimits(cpu_s=120, memory_mib=4096, processes=256)
GUARDED_NAMES = frozenset(
    {
        "conftest.py",
        "pytest.ini",
        "tox.ini",
        "setup.cfg",
        "pyproject.toml",
        "sitecustomize.py",
        "usercustomize.py",
    }
)
HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
NO_NEWLINE = "\\ No newline at end of file"
_sandboxes: dict[str, Sandbox] = {}
Expected = dict[str, list[str | None] | None]  # by test: each assertion's fingerprint (None: not compared)
_expected: dict[str, Expected] = {}  # by task, from the original library's runs


def read_runner() -> bytes:
    """testrun.py as it is now, refused unless it is the runner this file was written for."""
    source = RUNNER.read_bytes()
    digest = hashlib.sha256(source).hexdigest()
    if digest != RUNNER_SHA256:
        raise RuntimeError(
            f"{RUNNER} has sha256 {digest}, not the {RUNNER_SHA256} this evaluator expects: restore it "
            "(an agent run without the sandbox can rewrite it), or set RUNNER_SHA256 in reward.py if you "
            "changed it yourself"
        )
    return source


RUNNER_SOURCE = read_runner()  # the only read: each evaluation writes this copy


class PatchError(ValueError):
    """A patch that cannot be read, or does not apply to the working copy."""


# -- the agent's patch ----------------------------------------------------------------------------------


# No dataclasses here: Tether loads an evaluator's file without registering it in sys.modules, which
# dataclasses look their module up in.
class Hunk:
    def __init__(self, old_start: int) -> None:
        self.old_start = old_start
        self.lines: list[tuple[str, str]] = []  # (" " | "-" | "+", the line with its end)

    def old(self) -> list[str]:
        return [text for tag, text in self.lines if tag != "+"]

    def new(self) -> list[str]:
        return [text for tag, text in self.lines if tag != "-"]


class FilePatch:
    def __init__(self, old: str | None, new: str | None) -> None:
        self.old = old  # the path, None for a created file
        self.new = new  # the path, None for a deleted file
        self.hunks: list[Hunk] = []

    @property
    def path(self) -> str:
        return str(self.new or self.old)


def split_lines(text: str) -> list[str]:
    """Lines with their "\\n" (and only "\\n": a form feed inside a line stays in it), as agent.py splits."""
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def submitted_patch(output: str | None) -> str | None:
    try:
        result = json.loads(output or "")
    except json.JSONDecodeError:
        return None
    patch = result.get("patch") if isinstance(result, dict) else None
    return patch if isinstance(patch, str) else None


def header_path(line: str, prefix: str) -> str | None:
    """The path of a `--- a/PATH` or `+++ b/PATH` line (None for /dev/null), checked to stay in the tree."""
    name = line[4:].rstrip("\n").split("\t")[0].strip()
    if name == "/dev/null":
        return None
    if name.startswith(prefix):
        name = name[len(prefix) :]
    path = PurePosixPath(name)
    if not name or "\0" in name or path.is_absolute() or ".." in path.parts or name != path.as_posix():
        raise PatchError(f"a path outside the working copy: {name[:80]!r}")
    return name


def parse_patch(text: str) -> list[FilePatch]:
    lines, patches, i = split_lines(text), [], 0
    while i < len(lines):
        if lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            patch = FilePatch(header_path(lines[i], "a/"), header_path(lines[i + 1], "b/"))
            if patch.old is None and patch.new is None:
                raise PatchError("a file patch from /dev/null to /dev/null")
            i = parse_hunks(lines, i + 2, patch)
            patches.append(patch)
        else:
            i += 1  # text between file patches (a `diff` line, a comment) is not the patch's
    return patches


def parse_hunks(lines: list[str], i: int, patch: FilePatch) -> int:
    while i < len(lines) and (found := HUNK.match(lines[i])):
        old_count = int(found.group(2) if found.group(2) is not None else 1)
        new_count = int(found.group(4) if found.group(4) is not None else 1)
        hunk = Hunk(int(found.group(1)))
        i += 1
        while old_count > 0 or new_count > 0:
            if i >= len(lines) or not lines[i] or lines[i][0] not in " -+":
                raise PatchError(f"a hunk of {patch.path} ends early")
            tag, text = lines[i][0], lines[i][1:]
            old_count -= tag != "+"
            new_count -= tag != "-"
            if old_count < 0 or new_count < 0:
                raise PatchError(f"a hunk of {patch.path} is longer than its header says")
            i += 1
            if i < len(lines) and lines[i].rstrip("\n") == NO_NEWLINE:
                text, i = text.removesuffix("\n"), i + 1
            hunk.lines.append((tag, text))
        patch.hunks.append(hunk)
    return i


def apply_file(old: list[str], patch: FilePatch) -> list[str]:
    """The file's lines with the patch's hunks applied exactly where they say (no fuzz)."""
    result, position = [], 0
    for hunk in patch.hunks:
        expected = hunk.old()
        start = hunk.old_start - 1 if expected else hunk.old_start
        if start < position or old[start : start + len(expected)] != expected:
            raise PatchError(f"a hunk of {patch.path} does not apply at line {hunk.old_start}")
        result += old[position:start] + hunk.new()
        position = start + len(expected)
    return result + old[position:]


def apply_patch(tree: Path, patches: list[FilePatch]) -> None:
    for patch in patches:
        source, target = (tree / patch.old if patch.old else None), (tree / patch.new if patch.new else None)
        missing = source is not None and not source.is_file()
        if missing or (source is None and target is not None and target.exists()):
            raise PatchError(f"{patch.path}: the patch does not fit the working copy")
        old = split_lines(source.read_bytes().decode(errors="replace")) if source is not None else []
        new = "".join(apply_file(old, patch))
        if source is not None and source != target:
            source.unlink()
        if target is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(new)
        elif new:
            raise PatchError(f"{patch.path}: deleted, but the patch leaves lines in it")


def tampers(path: str, hidden: set[str]) -> bool:
    """Whether a patch on `path` touches the tests or what pytest reads (see the module docstring)."""
    parts = PurePosixPath(path).parts
    test_folders = {str(PurePosixPath(p).parent) for p in hidden if p.endswith(".py")} - {"."}
    return (
        path in hidden
        or any(path.startswith(folder + "/") for folder in test_folders)
        or "tests" in parts[:-1]
        or parts[-1] in GUARDED_NAMES
        or parts[-1].endswith(".pth")
    )


# -- the working tree and the tests --------------------------------------------------------------------


def unpack(archive: str) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(archive)), mode="r:gz") as tar:
        for member in tar.getmembers():
            path = PurePosixPath(member.name)
            if member.isfile() and not path.is_absolute() and ".." not in path.parts:
                handle = tar.extractfile(member)
                assert handle is not None
                files[path.as_posix()] = handle.read()
    return files


def write_files(root: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)


def test_paths(hidden: dict[str, bytes]) -> list[str]:
    """What pytest is given: the folders of the hidden test files (the files themselves at the top), so
    that no file of the agent's is collected."""
    folders = {str(PurePosixPath(p).parent) for p in hidden if p.endswith(".py")}
    return sorted((folders - {"."}) | {p for p in hidden if p.endswith(".py") and "/" not in p})


def sandbox() -> Sandbox:
    kind = os.environ.get("CODING_EVAL_SANDBOX", "bwrap")
    if kind not in _sandboxes:
        hide = tuple(str(path) for path in project_hide(Path.cwd()))
        _sandboxes[kind] = open_sandbox(kind, SandboxOptions(limits=LIMITS, hide=hide))
    return _sandboxes[kind]


def run_hidden_tests(scratch: Path, tree: Path, targets: list[str]) -> dict[str, Any] | None:
    """The test process's report (`outcomes` and `assertions`, see testrun.py), from testrun.py run in the
    sandbox; None when it did not finish or wrote something else."""
    runner, results = scratch / RUNNER.name, scratch / "results.json"
    runner.write_bytes(RUNNER_SOURCE)
    argv = [sys.executable, "-I", str(runner), "--assertions", "--tree", str(tree), "--out", str(results)]
    command = CommandAgent(shlex.join([*argv, *targets]), cwd=str(scratch), sandbox=sandbox())
    ran = asyncio.run(command.run({}, {}, LLM(base_url="", api_key=""), EVAL_TIMEOUT_S))
    if ran.error is not None and ran.error.startswith("the sandbox could not start"):
        raise RuntimeError(ran.error)  # the machine's fault, not the agent's: fail the rollout loudly
    if not results.is_file() or results.stat().st_size > RESULTS_LIMIT:
        return None
    try:
        report = json.loads(results.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return report if well_formed(report) else None


def well_formed(report: Any) -> bool:
    def names_to(value: Any, check: Any) -> bool:
        return isinstance(value, dict) and all(isinstance(k, str) and check(v) for k, v in value.items())

    def fingerprints(value: Any) -> bool:
        return isinstance(value, list) and all(isinstance(item, str) for item in value)

    return (
        isinstance(report, dict)
        and not report.get("collect_errors")
        and names_to(report.get("outcomes"), lambda v: v in ("passed", "failed", "skipped"))
        and names_to(report.get("assertions"), fingerprints)
    )


def expected_assertions(task: dict[str, Any], hidden: dict[str, bytes]) -> Expected:
    """Each test's assertion fingerprints on the original library: two runs in the sandbox, once per task."""
    reference = task["reference"]
    key = hashlib.sha256(json.dumps([task["repo"], reference], sort_keys=True).encode()).hexdigest()
    if key not in _expected:
        files = unpack(task["repo"]["archive"])
        source = files[reference["file"]].decode()
        files[reference["file"]] = source.replace(reference["buggy"], reference["original"], 1).encode()
        runs = [original_run(task["repo"]["name"], files | hidden) for _ in range(2)]
        _expected[key] = stable_assertions(*runs)
    return _expected[key]


def original_run(name: str, files: dict[str, bytes]) -> dict[str, list[str]]:
    with tempfile.TemporaryDirectory(prefix="coding-original-") as folder:
        write_files(Path(folder) / name, files)
        report = run_hidden_tests(Path(folder), Path(folder) / name, test_paths(files))
    if report is None:
        raise RuntimeError("the hidden tests did not run on the original library: see the task's reference")
    return dict(report["assertions"])


def stable_assertions(first: dict[str, list[str]], second: dict[str, list[str]]) -> Expected:
    """Fingerprints the two original runs agree on (None where they differ); None for a test whose count
    of assertions differs between them, or that ran none."""
    expected: Expected = {}
    for test in first.keys() | second.keys():
        a, b = first.get(test, []), second.get(test, [])
        comparable = len(a) == len(b) and bool(a)
        expected[test] = [x if x == y else None for x, y in zip(a, b, strict=True)] if comparable else None
    return expected


def confirmed(report: dict[str, Any], expected: Expected) -> dict[str, str]:
    """The reported outcomes, with a pass whose assertions do not match the original's turned to failed."""
    outcomes: dict[str, str] = dict(report["outcomes"])
    for test, outcome in outcomes.items():
        wanted, seen = expected.get(test), report["assertions"].get(test, [])
        if outcome == "passed" and wanted is not None:
            same = len(seen) == len(wanted) and all(
                want is None or want == saw for want, saw in zip(wanted, seen, strict=False)
            )
            outcomes[test] = "passed" if same else "failed"
    return outcomes


def score(outcomes: dict[str, str] | None, reference: dict[str, Any]) -> dict[str, float]:
    def passing(tests: list[str]) -> float:
        if outcomes is None or not tests:
            return 0.0 if tests else 1.0
        return sum(outcomes.get(test) == "passed" for test in tests) / len(tests)

    fail_to_pass, pass_to_pass = passing(reference["fail_to_pass"]), passing(reference["pass_to_pass"])
    solved = outcomes is not None and fail_to_pass == 1.0 and pass_to_pass == 1.0
    return {
        "reward": float(solved),
        "fail_to_pass": fail_to_pass,
        "pass_to_pass": pass_to_pass,
        "tampered": 0.0,
        "unverified": 0.0,
    }


class Verdict:
    """The scores, and what the test process reported (None when it reported nothing usable)."""

    def __init__(self, values: dict[str, float], report: dict[str, Any] | None = None) -> None:
        self.values = values
        self.report = report


NOTHING = {"reward": 0.0, "fail_to_pass": 0.0, "pass_to_pass": 0.0, "tampered": 0.0, "unverified": 0.0}


def fixed(task: dict[str, Any], output: str | None) -> dict[str, float]:
    """The reward of the agent's final working tree on the task's hidden tests (see the module docstring)."""
    return evaluate(task, output).values


def evaluate(task: dict[str, Any], output: str | None) -> Verdict:
    reference = task["reference"]
    text = submitted_patch(output)
    if not text:
        return Verdict(dict(NOTHING))
    hidden = unpack(reference["tests"])
    try:
        patches = parse_patch(text)
    except PatchError:
        return Verdict(dict(NOTHING))
    if any(tampers(name, set(hidden)) for patch in patches for name in (patch.old, patch.new) if name):
        return Verdict(NOTHING | {"tampered": 1.0})
    with tempfile.TemporaryDirectory(prefix="coding-eval-") as folder:
        scratch = Path(folder)
        tree = scratch / task["repo"]["name"]
        write_files(tree, unpack(task["repo"]["archive"]))
        try:
            apply_patch(tree, patches)
        except (PatchError, OSError):
            return Verdict(dict(NOTHING))
        write_files(tree, hidden)  # the original tests and test configuration, whatever the tree holds
        report = run_hidden_tests(scratch, tree, test_paths(hidden))
    if report is None:
        return Verdict(score(None, reference))
    outcomes = confirmed(report, expected_assertions(task, hidden))
    forged = any(report["outcomes"][test] != outcome for test, outcome in outcomes.items())
    return Verdict(score(outcomes, reference) | {"unverified": float(forged)}, report)
