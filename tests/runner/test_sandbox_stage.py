"""The stage folders of `sandbox_stage.py` (as root, the paths an agent of `nobody` is shown): one a
killed Tether left is removed when the next sandbox starts; one whose Tether is alive is kept."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from tether.runner.sandbox import STAGE_PREFIX, BwrapSandbox

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.usefixtures("bwrap_installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="as root: only then are agents' views staged"),
]


def test_a_stage_folder_a_killed_tether_left_is_swept_when_the_next_sandbox_starts() -> None:
    temp = Path(tempfile.gettempdir())  # where Tether makes them (the agent's user must reach the checks')
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid is no process's now, as a killed Tether's
    left = Path(tempfile.mkdtemp(prefix=f"{STAGE_PREFIX}{gone.pid}-"))
    alive = Path(tempfile.mkdtemp(prefix=f"{STAGE_PREFIX}{os.getppid()}-"))
    try:
        sandbox = BwrapSandbox()
        sandbox.check(sandbox.default_identity())
        assert not left.exists() and alive.exists()
        assert list(temp.glob(f"{STAGE_PREFIX}{os.getpid()}-*"))  # this process's, made by the check
    finally:
        for path in (left, alive):
            if path.exists():
                path.rmdir()
