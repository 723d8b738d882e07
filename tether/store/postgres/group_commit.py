"""Group commit: writes that arrive while one commit runs share the next one.

Callers (threads) hand in their batch and block until it is committed. Whoever finds no commit running
leads: it writes everything waiting, one transaction, then passes the lead to the first caller still
waiting, so no caller serves the others for longer than one commit. A batch the store cannot keep (its
content is at fault) fails alone: a group that fails that way is written again batch by batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from tether.store.base import InvalidValue

T = TypeVar("T")


@dataclass(eq=False)
class _Entry(Generic[T]):
    items: Sequence[T]
    wake: threading.Event = field(default_factory=threading.Event)  # settled, or its turn to lead
    settled: bool = False  # written, or failed for good
    error: BaseException | None = None


class GroupCommit(Generic[T]):
    def __init__(self, write: Callable[[Sequence[T]], None]) -> None:
        self._write = write  # one transaction for everything it is given
        self._lock = threading.Lock()
        self._waiting: list[_Entry[T]] = []
        self._leading = False
        self.commits = 0

    def submit(self, items: Sequence[T]) -> None:
        """Return once `items` are committed; raise what kept them from being."""
        entry: _Entry[T] = _Entry(items)
        with self._lock:
            self._waiting.append(entry)
            lead = not self._leading
            self._leading = True
        if not lead:
            entry.wake.wait()
        if not entry.settled:  # not written yet: woken to lead the next group, its own included
            self._lead()
        if entry.error is not None:
            raise entry.error

    def _lead(self) -> None:
        with self._lock:
            group, self._waiting = self._waiting, []
        try:
            self._commit(group)
        finally:
            with self._lock:
                successor = self._waiting[0] if self._waiting else None
                self._leading = successor is not None
            for entry in group:
                entry.settled = True
                entry.wake.set()
            if successor is not None:
                successor.wake.set()

    def _commit(self, group: list[_Entry[T]]) -> None:
        try:
            self._write([item for entry in group for item in entry.items])
            self.commits += 1
        except InvalidValue as exc:
            if len(group) == 1:
                group[0].error = exc
                return
            for entry in group:
                self._commit([entry])
        except BaseException as exc:  # noqa: BLE001 - handed to every caller of the group
            for entry in group:
                entry.error = exc
