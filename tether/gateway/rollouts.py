"""The rollouts model calls name, as the gateway last read them from the store.

Every call checks its rollout (live, running, current attempt), and the gateway must not block its event
loop on the store to do it. So an entry stays valid while the store's `rollouts_epoch()` is unchanged (a
hit is a dict lookup, no thread); a miss reads the store on a worker thread.

An entry holds the rollout's status and current attempt, and every claim and close in this process moves
the epoch, so an attempt's token dies with the very next call after its attempt ends. A change made by
another process shows within the store's recheck interval (`rollouts_epoch`); a token of an attempt newer
than the entry knows is checked against a fresh read (`live`), so a new attempt is never refused for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

from tether.store.auth import AuthError, check_live, find_rollout, may_be_stale
from tether.store.base import Store
from tether.store.records import Rollout

CACHE_SIZE = 4096


class RolloutCache:
    def __init__(self, store: Store, size: int = CACHE_SIZE) -> None:
        self._store = store
        self._size = size
        self._entries: dict[str, tuple[Hashable, Rollout]] = {}

    async def get(self, rollout_id: str, fresh: bool = False) -> Rollout | None:
        """The rollout, or None if the store has none of that id; `fresh`: read from the store."""
        # Read before the rollout: a change made during the read then shows as a newer epoch.
        epoch = self._store.rollouts_epoch()
        entry = self._entries.get(rollout_id)
        if entry is not None and entry[0] == epoch and not fresh:
            return entry[1]
        rollout = await asyncio.to_thread(find_rollout, self._store, rollout_id)
        if rollout is not None:  # an unknown id is not kept: it may be created at any time
            if len(self._entries) >= self._size:
                self._entries.clear()
            self._entries[rollout_id] = (epoch, rollout)
        return rollout

    async def live(self, rollout_id: str, attempt: int | None) -> Rollout:
        """The rollout, if `attempt` (None: any) is live on it (`check_live`); else an `AuthError`."""
        try:
            return check_live(rollout_id, await self.get(rollout_id), attempt)
        except AuthError as exc:
            if not may_be_stale(exc):
                raise
        return check_live(rollout_id, await self.get(rollout_id, fresh=True), attempt)
