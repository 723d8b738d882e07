"""Fixtures of the runner tests: warm starts closed after each test, and an interpreter with modules
installed in its own site-packages, the only place (with the standard library) a warm interpreter
preloads modules from."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tether.runner.warm import WarmStarts

Installer = Callable[[dict[str, str]], str]


@pytest.fixture
def installed_python(tmp_path: Path) -> Installer:
    """A factory: a fresh virtual environment of this Python with the given files (relative path ->
    source) in its site-packages; the path of its interpreter."""

    def install(files: dict[str, str]) -> str:
        venv = tmp_path / "site-venv"
        if not venv.exists():
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        purelib = subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        for name, source in files.items():
            target = Path(purelib) / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(source)
        return python

    return install


@pytest.fixture
def warm() -> Iterator[WarmStarts]:
    """Warm starts for one test, closed after it."""
    starts = WarmStarts()
    yield starts
    starts.close()
