"""Runs a library's tests with pytest and writes each test's outcome as JSON.

tasks.py runs it in a forked child (`run`, with `coverage` for the baseline: which of the library's
functions each test executes); reward.py copies this file into the evaluator's sandbox and runs it there
as a script:

    python -I testrun.py --tree DIR --out RESULTS.json [TEST_PATH_OR_NODE_ID ...]

RESULTS.json: {"outcomes": {node id: "passed" | "failed" | "skipped"}, "collect_errors": [...],
"exit_code": N, with `--assertions` "assertions": {node id: [fingerprint, ...]}, and with coverage
"coverage": {node id: [[file, first line], ...]}, "at_import": [[file, first line], ...]}. A test counts as
failed when any of its phases failed (an error in a fixture too), skipped when it was skipped or xfailed.
Only the pytest plugins named here load (no entry points).

An assertion's fingerprint stands for the values it saw: pytest's account of an assertion that held (the
assert statement, its compared values and the intermediate ones, printed in full), with memory addresses
and the scratch folder's path taken out, its characters sorted (sets of objects print in an order that
changes from run to run), hashed. reward.py compares them with the original library's: see its docstring.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

RANK = {"passed": 0, "skipped": 1, "failed": 2}
PYTEST_ARGS = [
    "-q",
    "-p",
    "no:cacheprovider",
    "-p",
    "no:cov",
    "--no-header",
    "-o",
    "console_output_style=classic",
]
ASSERTION_ARGS = ["-o", "enable_assertion_pass_hook=true", "-o", "verbosity_assertions=2"]
ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


class Outcomes:
    """A pytest plugin that keeps each test's worst outcome, and the files that failed to collect."""

    def __init__(self) -> None:
        self.outcomes: dict[str, str] = {}
        self.collect_errors: list[str] = []

    def _note(self, nodeid: str, outcome: str) -> None:
        if RANK[outcome] >= RANK.get(self.outcomes.get(nodeid, "passed"), 0):
            self.outcomes[nodeid] = outcome

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self._note(report.nodeid, "failed")
        elif report.skipped:
            self._note(report.nodeid, "skipped")
        elif report.when == "call":
            self._note(report.nodeid, "passed")

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collect_errors.append(report.nodeid or "<session>")


class Assertions:
    """A pytest plugin that keeps a fingerprint of each assertion that held, per test, in order."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = str(scratch)
        self.by_test: dict[str, list[str]] = {}

    def pytest_assertion_pass(self, item: pytest.Item, lineno: int, orig: str, expl: str) -> None:
        self.by_test.setdefault(item.nodeid, []).append(self.fingerprint(f"{lineno}:{orig}:{expl}"))

    def fingerprint(self, account: str) -> str:
        values = account.split("\n  \n", 1)[0]  # what follows the values is a diff of them, laid out
        values = ADDRESS.sub("0x", values.replace(self.scratch, "<scratch>"))
        return hashlib.sha256("".join(sorted(values)).encode()).hexdigest()[:24]


class Coverage:
    """A pytest plugin that records which functions of `files` each test calls (by code object: file and
    first line), and which ones run while the tests are collected (at import time)."""

    def __init__(self, tree: Path, files: list[str]) -> None:
        self.tree = tree
        self.names = {str(tree / f): f for f in files} | {os.path.realpath(tree / f): f for f in files}
        self.at_import: set[tuple[str, int]] = set()
        self.by_test: dict[str, set[tuple[str, int]]] = {}
        self.sink = self.at_import

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            name = self.names.get(frame.f_code.co_filename)
            if name is not None:
                self.sink.add((name, frame.f_code.co_firstlineno))

    def _tracing(self) -> Iterator[None]:
        sys.setprofile(self._profile)
        threading.setprofile(self._profile)
        try:
            yield
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_collection(self, session: pytest.Session) -> Iterator[None]:
        self.sink = self.at_import
        yield from self._tracing()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        self.sink = self.by_test.setdefault(item.nodeid, set())
        yield from self._tracing()

    def report(self) -> dict[str, Any]:
        return {
            "coverage": {test: sorted(calls) for test, calls in self.by_test.items()},
            "at_import": sorted(self.at_import),
        }


def run(
    tree: Path,
    targets: list[str],
    out: Path,
    coverage: list[str] | None = None,
    assertions: bool = False,
) -> int:
    """Run `targets` (test paths or node ids, relative to `tree`) with `tree` as the rootdir; write the
    results to `out`. With `coverage` (the library's files, relative), record what each test calls; with
    `assertions`, the fingerprints of the assertions that held."""
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    sys.dont_write_bytecode = True  # a mutated module must never be read back from a stale .pyc
    os.chdir(tree)
    outcomes = Outcomes()
    plugins: list[Any] = [outcomes]
    traced = Coverage(tree, coverage) if coverage is not None else None
    if traced is not None:
        plugins.append(traced)
    held = Assertions(tree.parent) if assertions else None
    if held is not None:
        plugins.append(held)
    options = [*PYTEST_ARGS, *(ASSERTION_ARGS if assertions else []), "--rootdir", str(tree)]
    code = int(pytest.main([*options, *targets], plugins=plugins))
    results: dict[str, Any] = {
        "outcomes": outcomes.outcomes,
        "collect_errors": outcomes.collect_errors,
        "exit_code": code,
    }
    if held is not None:
        results["assertions"] = held.by_test
    if traced is not None:
        results |= traced.report()
    out.write_text(json.dumps(results))
    return code


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tree", type=Path, required=True, help="the library's folder (pytest's rootdir)")
    parser.add_argument("--out", type=Path, required=True, help="where to write the results (JSON)")
    parser.add_argument("--assertions", action="store_true", help="fingerprint the assertions that held")
    parser.add_argument("targets", nargs="*", help="test paths or node ids, relative to --tree")
    args = parser.parse_args()
    run(args.tree.resolve(), args.targets, args.out.resolve(), assertions=args.assertions)


if __name__ == "__main__":
    main()
