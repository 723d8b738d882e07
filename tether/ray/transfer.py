"""How a folder (policy weights, a checkpoint) reaches an actor on another node.

By path when the actor sees the head's filesystem (a shared one, or the same machine), else its files
travel through Ray's object store and are written into a private temporary folder there. Which one is
used is found out by default (`--weights-transfer auto`): the head writes a probe file with a random
token next to the folder and asks the actor whether it can read it back. `path` and `stream` force one
way (`stream` where a path reads back but is not the same folder, say a node-local mount of that name).
"""

from __future__ import annotations

import os
import secrets
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

PROBE_PREFIX = ".tether-probe-"


@dataclass(frozen=True)
class Folder:
    """A folder as sent to an actor: its path (shared filesystem), or its files."""

    path: str
    files: dict[str, bytes] | None = None  # relative path -> content, when streamed

    @property
    def streamed(self) -> bool:
        return self.files is not None

    def materialize(self) -> Path:
        """Where the folder is on this node (a fresh temporary folder for streamed files)."""
        if self.files is None:
            return Path(self.path)
        target = Path(tempfile.mkdtemp(prefix="tether-streamed-"))
        unpack(self.files, target)
        return target


def pack(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def unpack(files: dict[str, bytes], target: Path) -> None:
    for relative, content in files.items():
        path = target / relative
        if ".." in Path(relative).parts:
            raise ValueError(f"refusing a streamed file outside its folder: {relative!r}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


def write_probe(directory: Path) -> tuple[str, str]:
    """A probe file in `directory`: its path and the token it holds."""
    directory.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    path = directory / f"{PROBE_PREFIX}{token}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token)
    return str(path), token


def can_read(path: str, token: str) -> bool:
    """Called on the actor's node: whether the head's probe file is here."""
    try:
        return Path(path).read_text() == token
    except OSError:
        return False


@dataclass
class FolderSender:
    """Decides, once per actor and parent folder, whether folders go by path or by content."""

    what: str
    mode: str = "auto"  # one of `tether.ray.cluster.WEIGHT_TRANSFERS`
    _shared: dict[tuple[str, str], bool] = field(default_factory=dict)
    _said: set[str] = field(default_factory=set)

    def shares(self, actor: Any, directory: Path) -> bool:
        import ray

        key = (actor._actor_id.hex(), str(directory))
        if key not in self._shared:
            if self.mode == "auto":
                probe, token = write_probe(directory)
                try:
                    self._shared[key] = bool(ray.get(actor.can_read.remote(probe, token)))
                finally:
                    Path(probe).unlink(missing_ok=True)
            else:
                self._shared[key] = self.mode == "path"
            how = "by path (shared filesystem)" if self._shared[key] else "through Ray's object store"
            if how not in self._said:  # once per way: which one is used is the user's to know
                self._said.add(how)
                Console(stderr=True).print(f"{self.what} reach Ray actors {how}")
        return self._shared[key]

    def folder_for(self, actor: Any, path: Path) -> Folder:
        return Folder(str(path), None if self.shares(actor, path.parent) else pack(path))
