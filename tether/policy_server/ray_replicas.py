"""Policy-server replicas as Ray actors, and the one sticky upstream the gateway routes to them.

Each replica actor opens any policy server kind registered in `tether.policy_server` on its node, with
`--gpus-per-replica` GPUs: `builtin`, or `vllm` (one vLLM server started on the actor's node, or a
running one given by URL). It serves its upstream's calls as actor calls: the exact token ids,
logprobs and policy version come back in the `CallRecord`, streams as Ray streaming generators.
The gateway sees one upstream, `ReplicaRouter`: a rollout sticks to one
replica (the stable hash of its id that `tether.gateway.upstreams.replicas` uses), and a replica whose
actor died is taken out of rotation, its rollouts moving to the next live one; the calls it had in
flight fail as clear 503s.

New weights reach each replica by path when it sees the head's filesystem, else streamed through Ray's
object store (`tether.ray.transfer`); which one is logged.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any

from tether.gateway.errors import GatewayError, UpstreamError
from tether.gateway.upstreams.base import CallKind, CallRecord
from tether.gateway.upstreams.replicas import stable_index
from tether.gateway.upstreams.sse import StreamAborted
from tether.policy_server import PolicyServerOptions, PolicyWeights, open_policy_server
from tether.ray.cluster import ActorPlacement, RayCluster, placement_of, where_am_i
from tether.ray.transfer import Folder, FolderSender

log = logging.getLogger(__name__)
UNAVAILABLE = "upstream_unavailable"


@dataclass(frozen=True)
class WireError:
    """A `GatewayError` as it crosses from a replica to the gateway."""

    status: int
    message: str
    type: str
    code: str | None
    param: str | None

    @classmethod
    def of(cls, error: GatewayError) -> WireError:
        return cls(error.status, error.message, error.type, error.code, error.param)

    def error(self) -> GatewayError:
        return GatewayError(self.status, self.message, type=self.type, code=self.code, param=self.param)


class ReplicaActor:
    """One policy server on one node (wrapped by `ray.remote` in `ReplicaSet`)."""

    def __init__(self, kind: str, options: PolicyServerOptions, cpus: float, gpus: float) -> None:
        self.where = where_am_i(cpus, gpus)
        self.server = open_policy_server(kind, options)
        self.upstream = self.server.upstream()

    def placement(self) -> dict[str, Any]:
        return self.where

    def policy_version(self) -> int | None:
        return self.server.policy_version

    async def call(self, kind: CallKind, body: dict[str, Any], owner: str | None) -> CallRecord | WireError:
        try:
            return await self.upstream.call(kind, body, owner=owner)
        except GatewayError as error:
            return WireError.of(error)

    async def stream(
        self, kind: CallKind, body: dict[str, Any], owner: str | None
    ) -> AsyncGenerator[bytes | CallRecord | WireError, None]:
        try:
            async for item in self.upstream.stream(kind, body, owner=owner):
                yield item
        except GatewayError as error:
            yield WireError.of(error)

    async def load(self, weights: PolicyWeights, folder: Folder) -> int:
        local = PolicyWeights(path=folder.materialize(), kind=weights.kind, version=weights.version)
        return await self.server.load(local)

    async def pause(self) -> None:
        await self.server.pause()

    async def resume(self) -> None:
        await self.server.resume()

    def can_read(self, path: str, token: str) -> bool:
        from tether.ray.transfer import can_read

        return can_read(path, token)

    def close(self) -> None:
        """Stop the server (a managed vLLM) or unload what it loaded into one the user runs."""
        self.server.close()


class ReplicaRouter:
    """The gateway's upstream over the replica actors: sticky by rollout, dead ones out of rotation."""

    def __init__(self, name: str, actors: Sequence[Any], version: int = 0) -> None:
        self.name = name
        self.actors = list(actors)
        self.version = version
        self._up = [True] * len(self.actors)
        self._lock = threading.Lock()
        self._round_robin = itertools.count()

    @property
    def policy_version(self) -> int | None:
        return self.version

    def live(self) -> list[int]:
        return [i for i, up in enumerate(self._up) if up]

    def mark_down(self, index: int, reason: str) -> None:
        with self._lock:
            was_up, self._up[index] = self._up[index], False
        if was_up:
            log.warning("replica %d of '%s' out of rotation: %s", index, self.name, reason)

    def pick(self, owner: str | None) -> int:
        count = len(self.actors)
        start = stable_index(owner, count) if owner else next(self._round_robin) % count
        for step in range(count):
            index = (start + step) % count
            if self._up[index]:
                return index
        raise UpstreamError(503, f"no replica of '{self.name}' is up ({count} lost)", code=UNAVAILABLE)

    def _lost(self, index: int, exc: Exception) -> UpstreamError:
        reason = f"replica {index} is gone: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        self.mark_down(index, reason)
        return UpstreamError(503, f"upstream '{self.name}': {reason}", code=UNAVAILABLE)

    async def call(self, kind: CallKind, body: dict[str, Any], *, owner: str | None = None) -> CallRecord:
        import ray

        index = self.pick(owner)
        try:
            result = await self.actors[index].call.remote(kind, body, owner)
        except ray.exceptions.RayActorError as exc:
            raise self._lost(index, exc) from None
        if isinstance(result, WireError):
            raise result.error()
        return result

    async def stream(
        self, kind: CallKind, body: dict[str, Any], *, owner: str | None = None
    ) -> AsyncGenerator[bytes | CallRecord, None]:
        import ray

        index = self.pick(owner)
        aborted = False
        try:
            async for ref in self.actors[index].stream.remote(kind, body, owner):
                item = await ref
                if isinstance(item, WireError):
                    raise item.error()
                if isinstance(item, CallRecord):
                    yield item
                    return
                if aborted:
                    continue  # the agent left: what is generated still goes into the span's record
                try:
                    yield item
                except StreamAborted:
                    aborted = True
        except ray.exceptions.RayActorError as exc:
            raise self._lost(index, exc) from None

    async def aclose(self) -> None:
        return None


class ReplicaSet:
    """A `PolicyServer` made of `count` replica actors of one policy server kind."""

    def __init__(
        self, cluster: RayCluster, kind: str, options: PolicyServerOptions, count: int, gpus: float
    ) -> None:
        import ray

        actor: Any = ray.remote(ReplicaActor)
        cpus = 0.0 if gpus else 1.0
        self.actors = [
            actor.options(num_cpus=cpus, num_gpus=gpus, max_concurrency=1000, max_restarts=0).remote(
                kind, options, cpus, gpus
            )
            for _ in range(count)
        ]
        self.router = ReplicaRouter(options.name, self.actors)
        self.sender = FolderSender("policy weights", cluster.settings.weights_transfer)

    @property
    def policy_version(self) -> int:
        return self.router.version

    def upstream(self) -> ReplicaRouter:
        return self.router

    def placements(self) -> list[ActorPlacement]:
        import ray

        wheres = ray.get([a.placement.remote() for a in self.actors])
        return [placement_of(f"replica {i}", where) for i, where in enumerate(wheres)]

    async def load(self, weights: PolicyWeights) -> int:
        live = self.router.live()
        folders = [
            await asyncio.to_thread(self.sender.folder_for, self.actors[i], weights.path) for i in live
        ]
        versions = await asyncio.gather(
            *(self.actors[i].load.remote(weights, folder) for i, folder in zip(live, folders, strict=True))
        )
        self.router.version = int(versions[0]) if versions else weights.version
        return self.router.version

    async def pause(self) -> None:
        await asyncio.gather(*(self.actors[i].pause.remote() for i in self.router.live()))

    async def resume(self) -> None:
        await asyncio.gather(*(self.actors[i].resume.remote() for i in self.router.live()))

    def close(self, timeout_s: float = 60.0) -> None:
        import ray

        closing = [self.actors[i].close.remote() for i in self.router.live()]
        try:
            ray.wait(closing, num_returns=len(closing), timeout=timeout_s)
        finally:  # a replica that does not close in time still ends: a managed vLLM stops with its actor
            for actor in self.actors:
                ray.kill(actor)
