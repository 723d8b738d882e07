"""The rollouts model calls name, as the gateway last read them from the store.

Every call checks its rollout (live, running, current attempt), and the gateway must not block its event
loop on the store to do it. So an entry stays valid while the store's `rollouts_epoch()` is unchanged (a
hit is a dict lookup, no thread); a miss reads the store on a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

from tether.auth import find_rollout
from tether.store.base import Store
from tether.store.models import Rollout

CACHE_SIZE = 4096


class RolloutCache:
    def __init__(self, store: Store, size: int = CACHE_SIZE) -> None:
        self._store = store
        self._size = size
        self._entries: dict[str, tuple[Hashable, Rollout]] = {}

    async def get(self, rollout_id: str) -> Rollout | None:
        """The rollout, or None if the store has none of that id."""
        # Read before the rollout: a change made during the read then shows as a newer epoch.
        epoch = self._store.rollouts_epoch()
        entry = self._entries.get(rollout_id)
        if entry is not None and entry[0] == epoch:
            return entry[1]
        rollout = await asyncio.to_thread(find_rollout, self._store, rollout_id)
        if rollout is not None:  # an unknown id is not kept: it may be created at any time
            if len(self._entries) >= self._size:
                self._entries.clear()
            self._entries[rollout_id] = (epoch, rollout)
        return rollout
