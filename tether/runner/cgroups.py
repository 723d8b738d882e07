"""A cgroup per sandboxed agent: a memory and a process cap on the whole sandbox, not on each process.

The per-process limits (`RLIMIT_DATA`, `RLIMIT_NPROC`) leave gaps: ten processes under a 512 MiB limit
hold 5 GiB together, and Linux applies no process count to uid 0. Where Tether may make cgroups (as root,
or in a delegated cgroup v2 subtree), each sandboxed attempt gets one of its own, under Tether's cgroup,
with `memory` and `pids` limits; cgroup v2 where `/sys/fs/cgroup` is one, else the v1 `memory` and
`pids` hierarchies. Elsewhere the per-process limits are all there is (docs/security.md).

The agent's side joins without seeing the cgroup file system: Tether opens each cgroup's `cgroup.procs`
and hands the descriptor to the sandbox's first process (the relay, or a warm child before it confines
itself), which writes "0" (itself) and closes it, before any of the agent's code runs. The kernel checks a
move against the credentials of whoever opened the file, so an agent of another user may join too; the
descriptor can move a process into this cgroup and nowhere else.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

ROOT = Path("/sys/fs/cgroup")
REMOVE_TRIES = 40  # x 25 ms: a sandbox's last processes are reaped just after its init exits


@dataclass(frozen=True)
class Hierarchy:
    """Where one controller's child cgroups go, and the file of its limit."""

    parent: Path
    limit_file: str


@dataclass(frozen=True)
class Caps:
    memory_bytes: int = 0  # 0: no cap
    processes: int = 0


class AgentCgroup:
    """One attempt's cgroups (one in v2, one per controller in v1), removed by `close`."""

    def __init__(self, folders: list[Path]) -> None:
        self.folders = folders
        self._fds: list[int] = []

    def open_procs(self) -> list[int]:
        """Descriptors of each `cgroup.procs`, for the sandbox's first process to join by (writing "0")."""
        self._fds = [os.open(folder / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC) for folder in self.folders]
        return list(self._fds)

    def close(self) -> None:
        """Kill what is left in it, then remove it (its processes are gone a moment after their init)."""
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = []
        for folder in self.folders:
            _remove(folder)


def _remove(folder: Path) -> None:
    for _ in range(REMOVE_TRIES):
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            _kill_members(folder)
            time.sleep(0.025)
    log.debug("cgroup %s is still busy; left behind", folder)


def _kill_members(folder: Path) -> None:
    with contextlib.suppress(OSError, ValueError):
        for pid in (folder / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(pid), signal.SIGKILL)


class Cgroups:
    """Makes `AgentCgroup`s where this machine lets Tether; `None` from `make` where it does not (said
    once, in the log)."""

    def __init__(self, root: Path = ROOT) -> None:
        self.root = root
        self._hierarchies: dict[str, Hierarchy] | None = None
        self._probed = False

    def make(self, caps: Caps) -> AgentCgroup | None:
        wanted = {name for name, value in (("memory", caps.memory_bytes), ("pids", caps.processes)) if value}
        if not wanted or not self.available():
            return None
        assert self._hierarchies is not None
        values = {"memory": caps.memory_bytes, "pids": caps.processes}
        name = f"tether-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        folders: list[Path] = []
        try:
            for parent in sorted({h.parent for key, h in self._hierarchies.items() if key in wanted}):
                folder = parent / name
                folder.mkdir()
                folders.append(folder)
                for key in sorted(wanted):
                    hierarchy = self._hierarchies[key]
                    if hierarchy.parent == parent:
                        (folder / hierarchy.limit_file).write_text(str(values[key]))
        except OSError as exc:
            AgentCgroup(folders).close()
            log.warning("sandbox: no cgroup for this agent (%s); its limits are per process only", exc)
            return None
        return AgentCgroup(folders)

    def parents(self) -> list[Path]:
        """The folders where agents' cgroups are made (none where Tether may make none)."""
        return sorted({h.parent for h in (self._hierarchies or {}).values()}) if self.available() else []

    def available(self) -> bool:
        if not self._probed:
            self._probed = True
            try:
                self._hierarchies = self._probe()
            except OSError as exc:
                log.info(
                    "sandbox: the memory and process caps are per process (no cgroup Tether may make: %s)",
                    exc,
                )
        return self._hierarchies is not None

    def _probe(self) -> dict[str, Hierarchy]:
        """The hierarchies to use, after a trial cgroup in each: made, its limit file there, joined by a
        child process as a sandbox's first process joins (through a descriptor), and removed."""
        found = self._v2() if (self.root / "cgroup.controllers").exists() else self._v1()
        for parent in {h.parent for h in found.values()}:
            _sweep(parent)
            trial = parent / f"tether-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            trial.mkdir()
            try:
                for hierarchy in found.values():
                    if hierarchy.parent == parent and not (trial / hierarchy.limit_file).exists():
                        raise OSError(f"{parent} has no {hierarchy.limit_file}")
                _join_once(trial)
            finally:
                _remove(trial)
        return found

    def _v2(self) -> dict[str, Hierarchy]:
        parent = self.root / _own_path("")
        enabled = (parent / "cgroup.subtree_control").read_text().split()
        missing = {"memory", "pids"} - set(enabled)
        if missing:
            raise OSError(f"cgroup v2: {', '.join(sorted(missing))} not delegated to {parent}")
        return {"memory": Hierarchy(parent, "memory.max"), "pids": Hierarchy(parent, "pids.max")}

    def _v1(self) -> dict[str, Hierarchy]:
        found = {}
        for key, limit_file in (("memory", "memory.limit_in_bytes"), ("pids", "pids.max")):
            mount = self.root / key
            if not (mount / "cgroup.procs").exists():
                raise OSError(f"cgroup v1: no {key} hierarchy at {mount}")
            found[key] = Hierarchy(mount / _own_path(key), limit_file)
        return found


def _sweep(parent: Path) -> None:
    """Remove the empty cgroups a Tether process left when it was killed (named after its pid)."""
    for folder in parent.glob("tether-*-*"):
        pid = folder.name.split("-")[-2]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        with contextlib.suppress(OSError):
            folder.rmdir()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        pass
    return True


def _join_once(folder: Path) -> None:
    """A short-lived child joins `folder` through a descriptor, as a sandbox's first process does."""
    fd = os.open(folder / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", f"import os; os.write({fd}, b'0')"],
            pass_fds=(fd,),
            capture_output=True,
            timeout=30,
        )
    finally:
        os.close(fd)
    if done.returncode != 0:
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        raise OSError(f"a process cannot join {folder}: {lines[-1] if lines else done.returncode}")


def _own_path(controller: str) -> str:
    """This process's cgroup in the hierarchy of `controller` ("" for v2), relative to its mount."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        names = controllers.split(",")
        if (controller == "" and names == [""]) or controller in names:
            return path.lstrip("/")
    raise OSError(f"this process is in no {controller or 'v2'} cgroup")
