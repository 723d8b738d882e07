"""Fixtures of the runner tests: warm starts closed after each test, and an interpreter with modules
installed in its own site-packages, the only place (with the standard library) a warm interpreter
preloads modules from."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.runner.sandbox_rig import ROOT, Start
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


@pytest.fixture(params=["cold", "warm"])
def start(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Start]:
    starting = Start(request.param == "warm", monkeypatch)
    yield starting
    starting.close()


@pytest.fixture
def outside_tmp() -> Iterator[Path]:
    """A folder outside /tmp (which the sandbox empties anyway), as a real project directory is: in the
    checkout, unless the checkout itself is under /tmp."""
    base = ROOT / "build"
    if str(ROOT.resolve()).startswith(("/tmp/", os.path.realpath(tempfile.gettempdir()) + "/")):
        base = Path.home() / ".cache" / "tether-sandbox-tests"
    base.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="sandbox-test-", dir=base))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def bwrap_installed() -> None:
    """For the sandbox's tests: bubblewrap is part of the test setup, so its absence fails them."""
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed: run scripts/ensure_bwrap.sh (make test does)")
