"""Rollout workers as Ray actors: each holds one agent slot on its node and runs the worker pool there.

An actor reserves `--agent-cpus` CPUs and the `--agent-resources` of one agent, so Ray's placement
decides which node runs which agent. Inside, it opens the store over HTTP (the gateway's app serves the
store API), and runs `tether.runner.pool.WorkerPool` with one worker: it claims the run's rollouts and
launches the unmodified agent as a local process with the same environment as on one machine, with URLs
that reach the head. Its worker id carries the node (`host/pid/ray:IP:ID8-0`), so the node of each
attempt is recorded on the attempt. A node that dies takes its actors with it: their attempts stop
heartbeating, the head's sweeper requeues them, and the workers on the other nodes run them.

`RayPool` is the head's side, with the interface the runner expects of a pool (`tether.runner.runner`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from tether.ray.cluster import ActorPlacement, RayCluster, node_label, placement_of, where_am_i
from tether.runner.agents import Agent
from tether.runner.pool import AgentEndpoints, RunnerConfig, WorkerPool
from tether.runner.rewards import Evaluator
from tether.store.auth import TokenAuthority
from tether.store.base import Store

log = logging.getLogger(__name__)
STOP_POLL_S = 0.2


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker actor needs, sent once when it starts."""

    gateway_url: str  # the advertised URL of the head's gateway (store API included)
    admin_token: str
    secret: bytes  # the project's token secret: the worker mints each rollout's own token
    model: str
    agent: Agent
    evaluator: Evaluator | None
    config: RunnerConfig
    run: str | None


class RolloutWorkerActor:
    """One agent slot on one node (wrapped by `ray.remote` in `worker_class`).

    A threaded actor: `serve` runs the pool on a plain asyncio loop of its own (Ray's async actors run
    uvloop, whose subprocesses lack what the agent launcher uses), `stop` arrives on another thread."""

    def __init__(self, spec: WorkerSpec, cpus: float) -> None:
        self.spec = spec
        self.where = where_am_i(cpus, 0.0)
        self._stopped = threading.Event()
        self._requeue: list[bool] = [False]  # read by `_serve` once stopped

    def placement(self) -> dict[str, Any]:
        return self.where

    def serve(self) -> str:
        """Run the pool until `stop`; returns the node label (raises if the pool's worker died)."""
        result: list[str] = []
        errors: list[BaseException] = []

        def run() -> None:
            # Ray installs uvloop's policy in its workers; the default one has the child watcher that
            # asyncio's subprocesses need.
            asyncio.set_event_loop_policy(asyncio.DefaultEventLoopPolicy())
            try:
                with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
                    result.append(runner.run(_serve(self.spec, self.where, self._stopped, self._requeue)))
            except BaseException as exc:  # handed to the caller's thread below
                errors.append(exc)

        thread = threading.Thread(target=run, name="tether-ray-pool")  # a thread with no loop running
        thread.start()
        thread.join()
        if errors:
            raise errors[0]
        return result[0]

    def stop(self, requeue: bool = False) -> None:
        self._requeue[0] = requeue
        self._stopped.set()


async def _serve(
    spec: WorkerSpec, where: dict[str, Any], stopped: threading.Event, requeue: list[bool]
) -> str:
    """The pool of one worker actor, until `stopped` (a module function: an `async def` method would make
    Ray run the actor's methods on one event loop, where `serve` would block every other call)."""
    from tether.store.client import StoreClient

    label = node_label(where["node_id"], where["node_ip"])
    store = StoreClient(spec.gateway_url, spec.admin_token)
    endpoints = AgentEndpoints(spec.gateway_url, TokenAuthority(spec.secret), spec.model)
    config = replace(spec.config, n_workers=1, worker_prefix=label)
    pool = WorkerPool(store, spec.agent, endpoints, spec.evaluator, config, spec.run)
    pool.start()
    try:
        while not stopped.is_set():
            failure = pool.failure()
            if failure is not None:
                raise RuntimeError(f"rollout worker on {label}: {failure}")
            await asyncio.sleep(STOP_POLL_S)
    finally:
        await pool.stop(requeue[0])
        store.close()
    return label


def worker_class(cpus: float, resources: dict[str, float]) -> Any:
    import ray

    # Threaded: `stop` comes in beside `serve`.
    actor: Any = ray.remote(RolloutWorkerActor)
    return actor.options(num_cpus=cpus, resources=resources or None, max_concurrency=4, max_restarts=0)


@dataclass(frozen=True)
class RayPoolOptions:
    """What the registered `ray` pool kind is made from (`tether.runner.pools`)."""

    cluster: RayCluster
    authority: TokenAuthority
    announce: Callable[[list[ActorPlacement], int], None] | None = None


class RayPool:
    """The runner's pool, made of `n_workers` actors placed by the cluster (see the module docstring)."""

    def __init__(
        self,
        cluster: RayCluster,
        spec: WorkerSpec,
        n_workers: int,
        announce: Callable[[list[ActorPlacement], int], None] | None = None,
    ) -> None:
        self.cluster = cluster
        self.spec = spec
        self.n_workers = n_workers
        self.announce = announce
        self.running = 0
        self._actors: list[Any] = []
        self._serving: list[Any] = []

    @classmethod
    def factory(
        cls,
        cluster: RayCluster,
        authority: TokenAuthority,
        announce: Callable[[list[ActorPlacement], int], None] | None = None,
    ) -> Callable[..., RayPool]:
        """A `PoolFactory` for `Runner(..., pools=...)`: called as `WorkerPool` is."""

        def make(
            store: Store,
            agent: Agent,
            endpoints: AgentEndpoints,
            evaluator: Evaluator | None,
            config: RunnerConfig,
            run: str | None,
            on_change: Callable[[], None] | None = None,
        ) -> RayPool:
            spec = WorkerSpec(
                endpoints.server_url,
                authority.admin_token,
                authority.secret,
                endpoints.model,
                agent,
                evaluator,
                config,
                run,
            )
            return cls(cluster, spec, config.n_workers, announce)

        return make

    def start(self) -> None:
        if self._actors:
            return
        settings = self.cluster.settings
        actor = worker_class(settings.agent_cpus, settings.agent_resources)
        self._actors = [actor.remote(self.spec, settings.agent_cpus) for _ in range(self.n_workers)]
        self._serving = [a.serve.remote() for a in self._actors]
        if self.announce is not None:
            announce = self.announce
            threading.Thread(
                target=lambda: announce(self.placements(), self.n_workers),
                daemon=True,
                name="tether-ray-placement",
            ).start()

    def placements(self, timeout_s: float = 60.0) -> list[ActorPlacement]:
        """Where each worker runs (those not placed within the timeout, or gone, are left out)."""
        import ray

        refs = [a.placement.remote() for a in self._actors]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        done = set(ready)
        placed = []
        for i, ref in enumerate(refs):
            if ref in done:
                with contextlib.suppress(ray.exceptions.RayActorError):
                    placed.append(placement_of(f"rollout worker {i}", ray.get(ref)))
        return placed

    async def stop(self, requeue: bool = False) -> None:
        import ray

        if not self._actors:
            return
        stops = [actor.stop.remote(requeue) for actor in self._actors]
        await asyncio.to_thread(ray.wait, self._serving, num_returns=len(self._serving), timeout=30)
        for ref in [*stops, *self._serving]:  # read, so that Ray does not report them as unhandled
            with contextlib.suppress(Exception):
                ray.get(ref, timeout=0)
        for actor in self._actors:
            ray.kill(actor)
        self._actors, self._serving = [], []

    def wake(self) -> None:
        return None  # each worker rechecks the store every second, and at once after a claim

    def failure(self) -> str | None:
        """Why no worker can work any more (every actor ended), or None while one still can."""
        import ray

        if not self._serving:
            return None
        done, _ = ray.wait(self._serving, num_returns=len(self._serving), timeout=0)
        if len(done) < len(self._serving):
            return None
        try:
            ray.get(done[0])
        except Exception as exc:  # an actor error carries its node's story
            cause = getattr(exc, "cause", None) or exc
            return f"every Ray rollout worker stopped: {type(cause).__name__}: {cause}"
        return "every Ray rollout worker stopped"
