"""The sandbox's cgroups (`tether/runner/cgroups.py`) on this machine's real cgroup file system: what a
killed Tether left is swept at the next start, and one that cannot be joined is never used. The caps
themselves are tried by a hostile agent in `test_sandbox.py`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tether.runner import cgroups
from tether.runner.cgroups import Caps, Cgroups

pytestmark = pytest.mark.skipif(
    not Cgroups().available(), reason="Tether may make no cgroup here (as root, or a delegated v2 subtree)"
)


def test_the_cgroups_a_killed_tether_left_are_swept_at_the_next_start() -> None:
    parent = Cgroups().parents()[0]
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale, ours = parent / f"tether-{gone.pid}-deadbeef0000", parent / f"tether-{os.getpid()}-0000deadbeef"
    stale.mkdir()
    ours.mkdir()
    try:
        assert Cgroups().available()
        assert not stale.exists() and ours.exists()  # a live process's are left alone
    finally:
        for folder in (stale, ours):
            if folder.exists():
                folder.rmdir()


def test_a_cgroup_no_process_can_join_is_never_used(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def refused(folder: Path) -> None:
        raise OSError(f"a process cannot join {folder}: Permission denied")

    monkeypatch.setattr(cgroups, "_join_once", refused)
    made = Cgroups()
    assert not made.available() and made.make(Caps(memory_bytes=1 << 30, processes=16)) is None
    assert not [p for parent in Cgroups().parents() for p in parent.glob(f"tether-probe-{os.getpid()}-*")]
