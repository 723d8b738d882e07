"""Several replicas of one policy server as one upstream, with each rollout sticking to one replica.

A rollout's calls share long prefixes (each turn extends the last), so they go to the same replica,
chosen by a stable hash of the rollout id, and reuse its prefix cache. A replica that cannot be
reached is taken out of rotation: the calls it had in flight fail as clear 5xx errors (recorded on their
spans by the gateway), its rollouts move to the next live replica, and it rejoins only when whoever
watches it (the policy server) calls `mark_up`, after loading it with the current version.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import threading
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any

from tether.gateway.errors import UpstreamError
from tether.gateway.upstreams.base import CallKind, CallRecord
from tether.gateway.upstreams.http import HTTPUpstream, Target

log = logging.getLogger(__name__)
UNREACHABLE_CODE = "upstream_unavailable"  # what HTTPUpstream reports once its retries are used up


def stable_index(owner: str, count: int) -> int:
    """The same replica for the same rollout in every process (Python's `hash` is salted per process)."""
    digest = hashlib.blake2b(owner.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


class ReplicaUpstream:
    """An `Upstream` over `replicas`, all serving the same model under the same target."""

    def __init__(
        self,
        name: str,
        replicas: Sequence[HTTPUpstream],
        on_down: Callable[[int, str], None] | None = None,
    ) -> None:
        if not replicas:
            raise ValueError("a replica upstream needs at least one replica")
        self.name = name
        self.replicas = list(replicas)
        self.on_down = on_down
        self._up = [True] * len(self.replicas)
        self._lock = threading.Lock()
        self._round_robin = itertools.count()

    @property
    def policy_version(self) -> int | None:
        return self.replicas[0].policy_version

    @property
    def target(self) -> Target:
        return self.replicas[0].target

    def retarget(self, model: str | None, policy_version: int | None) -> None:
        for replica in self.replicas:
            replica.retarget(model, policy_version)

    def live(self) -> list[int]:
        return [index for index, up in enumerate(self._up) if up]

    def is_up(self, index: int) -> bool:
        return self._up[index]

    def mark_up(self, index: int) -> None:
        with self._lock:
            self._up[index] = True

    def mark_down(self, index: int, reason: str) -> None:
        with self._lock:
            was_up, self._up[index] = self._up[index], False
        if was_up:
            log.warning("replica %d of '%s' out of rotation: %s", index, self.name, reason)
            if self.on_down is not None:
                self.on_down(index, reason)

    def pick(self, owner: str | None) -> int:
        """The replica for this rollout: its hashed one if live, else the next live one after it."""
        count = len(self.replicas)
        start = stable_index(owner, count) if owner else next(self._round_robin) % count
        for step in range(count):
            index = (start + step) % count
            if self._up[index]:
                return index
        raise UpstreamError(
            503,
            f"no replica of '{self.name}' is up ({count} out of rotation); the call can be retried once "
            "one is back",
            code=UNREACHABLE_CODE,
        )

    def _failed(self, index: int, error: UpstreamError) -> None:
        if error.code == UNREACHABLE_CODE:
            self.mark_down(index, str(error))

    async def call(self, kind: CallKind, body: dict[str, Any], *, owner: str | None = None) -> CallRecord:
        index = self.pick(owner)
        try:
            return await self.replicas[index].call(kind, body, owner=owner)
        except UpstreamError as error:
            self._failed(index, error)
            raise

    async def stream(
        self, kind: CallKind, body: dict[str, Any], *, owner: str | None = None
    ) -> AsyncGenerator[bytes | CallRecord, None]:
        index = self.pick(owner)
        try:
            async for item in self.replicas[index].stream(kind, body, owner=owner):
                yield item
        except UpstreamError as error:
            self._failed(index, error)
            raise

    async def aclose(self) -> None:
        for replica in self.replicas:
            await replica.aclose()
