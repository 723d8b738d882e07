"""A registry of named implementations: how each seam (store backends, policy servers, learners) lets a
new implementation in with one `register` line, without edits anywhere else."""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, what: str) -> None:
        self.what = what
        self._entries: dict[str, T] = {}

    def register(self, kind: str, entry: T) -> None:
        self._entries[kind] = entry

    def kinds(self) -> list[str]:
        return sorted(self._entries)

    def find(self, kind: str) -> T | None:
        return self._entries.get(kind)

    def get(self, kind: str) -> T:
        entry = self._entries.get(kind)
        if entry is None:
            raise ValueError(f"unknown {self.what} {kind!r}: choose one of {', '.join(self.kinds())}")
        return entry
