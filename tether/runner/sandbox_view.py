"""What a bwrap sandbox shows of the host: built from an allow-list, never from the host's `/`.

The sandbox's root is an empty tmpfs (read-only once set up). Into it go, read-only:
- the system's shared parts (`SYSTEM_PARTS`: `/usr`, `/lib*`, `/bin`, `/sbin`, `/etc`), with every file
  and folder of `/etc` that not every user may read hidden (`/etc/shadow`, `/etc/ssl/private`, ...): an
  agent sees of `/etc` what any unprivileged account on the host could read;
- what the command runs from (`shown_paths`): a program named on its command line or found on `PATH`
  outside those parts, with its installation (`ENV/bin/python` brings its virtual environment and the
  Python installation that environment is made from); the folder of the first file the command names
  (the agent's own code, wherever it is, `/tmp` included; a JavaScript file's folder up to its
  `node_modules`), the other files it names, alone; Tether's own package (agents may import `tether`);
  and `--sandbox-show PATH`;
- then `/dev`, a private `/dev/shm`, `/proc`, empty `/tmp`, `/var/tmp` and `/run`, the scratch directory
  (read-write) and the relay's directory.
Nothing else exists there: no `$HOME`, `/root`, `/home`, `/srv`, other projects or sockets of the host.
Paths to hide (the project's `.tether/` and `.git`, the store's files, task files, the evaluator's) are
covered wherever they fall inside something shown.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

# The system's shared, read-only parts: programs, libraries and configuration.
SYSTEM_PARTS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
# Directories every process may write to or leave sockets in: empty in the sandbox.
SHARED_DIRS = ("/tmp", "/var/tmp", "/run")
# Folders whose whole content is never shown for a file in them (only that file is).
NEVER_WHOLE = ("/", "/root", "/home", "/srv", "/mnt", "/media", "/opt", "/var", "/tmp", "/var/tmp")
# A program's folder with one of these names belongs to an installation one level up (a virtual
# environment, /opt/node, ~/.pyenv): the whole installation is shown.
INSTALL_BIN = ("bin", "sbin", "shims")
TETHER_PACKAGE = str(Path(__file__).resolve().parents[1])
SHM_BYTES = 64 * 1024 * 1024
EMPTY = "empty"  # in the relay directory: the empty file shown in place of a hidden file


@dataclass(frozen=True)
class Layout:
    """Where things are, for one sandbox: its scratch directory (read-write), the relay's directory,
    what to hide, and what it shows read-only beside the system's parts."""

    scratch: str
    relay_dir: str
    hide: tuple[str, ...] = ()
    shown: tuple[str, ...] = ()
    scratch_bytes: int = 0  # > 0: the scratch directory is an empty tmpfs of this size, else the host's
    stage: str | None = None  # `shown` staged for the agent's user: STAGE/0, ... (sandbox_stage.py)
    stage_scratch: bool = False  # and the scratch directory (an --agent-cwd) at STAGE/rw


def mounts(layout: Layout, proc: list[str]) -> list[str]:
    """bwrap's mount options, in order (a later mount covers an earlier one)."""
    shared = shared_dirs()
    empty = os.path.join(layout.relay_dir, EMPTY)
    argv = [*system_parts()]
    argv += _hiding(etc_secrets(), empty)
    argv += ["--dev", "/dev", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm", *proc]
    for folder in shared:
        argv += ["--tmpfs", folder]
    for index, path in enumerate(layout.shown):
        argv += ["--ro-bind", path if layout.stage is None else os.path.join(layout.stage, str(index)), path]
    argv += ["--ro-bind", layout.relay_dir, layout.relay_dir]
    covered = [p for p in layout.hide if under(p, layout.shown) and not under(p, [layout.scratch])]
    again = [p for p in layout.hide if under(p, [layout.scratch])]  # the scratch's bind shows them again
    argv += _hiding(covered, empty)
    if layout.scratch_bytes:  # nothing of the host's folder in it: nothing to hide again either
        argv += ["--size", str(layout.scratch_bytes), "--perms", "0777", "--tmpfs", layout.scratch]
        again = []
    else:
        source = os.path.join(layout.stage, "rw") if layout.stage and layout.stage_scratch else layout.scratch
        argv += ["--bind", source, layout.scratch]
        argv += _hiding(again, empty)
    hidden_dirs = (p for p in [*covered, *again] if os.path.isdir(p))
    for folder in dict.fromkeys([*shared, *hidden_dirs, "/dev", "/"]):
        argv += ["--remount-ro", folder]
    return argv


@functools.cache
def system_parts() -> tuple[str, ...]:
    """The system's parts as they are here: a symlink (`/bin -> usr/bin`) as that symlink."""
    argv: list[str] = []
    for part in SYSTEM_PARTS:
        if os.path.islink(part):
            argv += ["--symlink", os.readlink(part), part]
        elif os.path.isdir(part):
            argv += ["--ro-bind", part, part]
    return tuple(argv)


@functools.cache
def etc_secrets() -> tuple[str, ...]:
    """What in /etc not every user may read: a file without read permission for others, or a folder
    without read and search permission for them (not walked into)."""
    found: list[str] = []

    def walk(folder: str) -> None:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            found.append(folder)
            return
        for entry in entries:
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode):
                if mode & 0o005 != 0o005:
                    found.append(entry.path)
                else:
                    walk(entry.path)
            elif not stat.S_ISLNK(mode) and not mode & 0o004:
                found.append(entry.path)

    walk("/etc")
    return tuple(found)


def shown_paths(
    argv: Sequence[str],
    path_env: str | None,
    programs: Iterable[str],
    extra: Iterable[str],
    hide: Sequence[str],
) -> tuple[str, ...]:
    """What a sandbox for `argv` shows beside the system's parts: what its program (found on
    `path_env`) and `programs` run from; the folder of the first file it names (the agent's code: its
    other modules live beside it) and the other files it names, alone; Tether's package; `extra`
    (--sandbox-show). None of `hide`, nothing inside another shown path."""
    first = argv[0] if argv else ""
    program = first if os.path.isabs(first) else shutil.which(first, path=path_env) if first else None
    named = [arg for arg in argv[1:] if os.path.isabs(arg) and os.path.isfile(arg)]
    found: list[str] = []
    for path in [*([program] if program else []), *programs]:
        found += [_installation(p) for p in _as_named_and_resolved(path)]
    for index, path in enumerate(named):
        found += [_agent_folder(p) if index == 0 else p for p in _as_named_and_resolved(path)]
    found += [p for q in found for p in _python_home(q)]
    found += [TETHER_PACKAGE, *(os.path.realpath(p) for p in extra if os.path.exists(p))]
    system = [p for p in SYSTEM_PARTS if os.path.exists(p)]
    kept = [p for p in dict.fromkeys(found) if not under(p, system) and not under(p, hide)]
    return tuple(sorted(p for p in kept if not any(p != q and under(p, [q]) for q in kept)))


def _as_named_and_resolved(path: str) -> list[str]:
    absolute = os.path.abspath(path)
    return list(dict.fromkeys([absolute, os.path.realpath(absolute)]))


def _installation(program: str) -> str:
    """What a program runs from: its folder, or the installation above a `bin` folder."""
    folder = os.path.dirname(program)
    parent = os.path.dirname(folder)
    if os.path.basename(folder) in INSTALL_BIN and parent not in NEVER_WHOLE and not _is_home(parent):
        return parent
    return folder if folder not in NEVER_WHOLE and not _is_home(folder) else program


def _agent_folder(path: str) -> str:
    """A file's folder (the agent's other modules live beside it): for a JavaScript file, up to the
    nearest folder with `node_modules`; a file in a folder never shown whole, alone."""
    folder = os.path.dirname(path)
    if path.endswith((".js", ".mjs", ".cjs", ".ts", ".mts", ".cts")):
        folder = _up_to_node_modules(folder)
    return path if folder in NEVER_WHOLE or _is_home(folder) else folder


def _up_to_node_modules(folder: str) -> str:
    current = folder
    while current not in NEVER_WHOLE and not _is_home(current):
        if os.path.isdir(os.path.join(current, "node_modules")):
            return current
        current = os.path.dirname(current)
    return folder


def _python_home(path: str) -> list[str]:
    """A virtual environment's base Python installation (`home` in its pyvenv.cfg: ENV/bin/python is
    a link into it)."""
    config = os.path.join(path, "pyvenv.cfg")
    if not os.path.isfile(config):
        return []
    for line in Path(config).read_text(errors="replace").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and os.path.isdir(value.strip()):
            return [_installation(os.path.join(os.path.realpath(value.strip()), "python"))]
    return []


def _is_home(folder: str) -> bool:
    home = os.path.expanduser("~")
    return folder == home or os.path.dirname(folder) == "/home"


def _hiding(paths: Iterable[str], empty: str) -> list[str]:
    """An empty directory over each directory, an empty file over each file."""
    argv: list[str] = []
    for path in paths:
        argv += ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", empty, path]
    return argv


def shared_dirs() -> list[str]:
    folders = [*SHARED_DIRS, tempfile.gettempdir()]
    return list(dict.fromkeys(os.path.realpath(f) for f in folders if os.path.isdir(f)))


def existing(paths: Iterable[str]) -> list[str]:
    return [os.path.realpath(p) for p in paths if os.path.isabs(p) and os.path.exists(p)]


def under(path: str, folders: Iterable[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)
