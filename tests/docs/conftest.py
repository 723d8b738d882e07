"""The docs' code blocks, counted at the end of a run that ran them."""

from __future__ import annotations

from typing import Any

from tests.docs.snippets import code_blocks

RUN_TEST = "test_snippets.py::test_the_block_runs"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    ran = [
        report
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", None) == "call"
        and "test_snippets.py::test_the_block_runs" in report.nodeid
    ]
    if not ran:
        return
    blocks = code_blocks()
    needs = [block.needs for block in blocks if block.needs]
    counts = ", ".join(f"{needs.count(kind)} need a {kind}" for kind in sorted(set(needs)))
    run = len(blocks) - len(needs)
    line = f"docs code blocks (shell, Python, TOML, JSON, YAML): {len(blocks)} in the README and docs/, "
    line += f"{run} run by tests/docs/test_snippets.py" + (f", {counts} (not run here)" if counts else "")
    terminalreporter.write_line(line)
