"""The docs site: its reference pages are what the code generates, it builds in strict mode (a broken link
or a page missing from the navigation fails), and the README stays a short front page."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.docs.snippets import ROOT
from tether.cli.reference import PAGES, cli_reference, python_reference

README_LINES = 150


def test_the_reference_pages_are_what_the_code_generates() -> None:
    for page, generated in zip(PAGES, (cli_reference(), python_reference()), strict=True):
        kept = (ROOT / "docs" / "reference" / page).read_text()
        assert kept == generated, f"docs/reference/{page} is out of date: run make docs"


def test_the_reference_lists_every_flag_with_its_config_key() -> None:
    text = cli_reference()
    assert "## tether train" in text and "## tether store agreement" in text
    assert "| `--group-size GROUP_SIZE` | `sampling.group_size` | `8` |" in text
    assert "default: $TETHER_MODEL, else smollm2-135m" in text


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").exists()


def test_the_readme_is_short_and_opens_with_the_two_fresh_machine_commands() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_LINES, f"README.md has {len(lines)} lines"
    opening = [line for line in lines[:6] if line.strip()]
    assert opening[1].startswith("**Fresh machine, main job**") and opening[1].endswith("`make demo`")
    assert opening[2].startswith("**Fresh machine, tests**") and opening[2].endswith("`make test`")
