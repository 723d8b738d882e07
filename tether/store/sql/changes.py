"""Rollout changes as a SQL store sees them: a counter (the rollout epoch) and the waiters to wake.

The store reports its own commits; a dialect that hears other processes' commits (PostgreSQL's LISTEN)
reports those too.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass(eq=False)
class Waiter:
    """One `wait_for` call: woken when one of its rollouts may have changed."""

    ids: frozenset[str]
    event: threading.Event = field(default_factory=threading.Event)


class Changes:
    def __init__(self) -> None:
        self._ticks = itertools.count(1)
        self._seen = 0  # the last tick taken for a change
        self._waiters: set[Waiter] = set()
        self._lock = threading.Lock()

    @property
    def epoch(self) -> int:
        return self._seen

    def changed(self, rollout_ids: Iterable[str] | None) -> None:
        """Some rollouts changed (None: any may have): a new epoch, and their waiters woken."""
        self._seen = next(self._ticks)
        with self._lock:
            waiters = list(self._waiters)
        changed = None if rollout_ids is None else set(rollout_ids)
        for waiter in waiters:
            if changed is None or not waiter.ids.isdisjoint(changed):
                waiter.event.set()

    @contextmanager
    def watching(self, rollout_ids: Iterable[str]) -> Iterator[Waiter]:
        """A waiter for these rollouts, registered while the block runs."""
        waiter = Waiter(frozenset(rollout_ids))
        with self._lock:
            self._waiters.add(waiter)
        try:
            yield waiter
        finally:
            with self._lock:
                self._waiters.discard(waiter)
