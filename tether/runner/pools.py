"""The kinds of worker pool a command can run its agents with (`--runner KIND`): a new one is a module
plus one `register(...)` line here. Each kind turns its options into the pool factory that `Runner`
takes (`Runner(..., pools=factory)`). Every pool claims its run's rollouts from the store and closes
them; the driver, which enqueues them and reads their outcomes from the store, is the same for all."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tether.registry import Registry
from tether.runner.pool import WorkerPool
from tether.runner.runner import PoolFactory

PoolKind = Callable[[Any], PoolFactory]  # the kind's options -> the factory Runner calls
POOL_KINDS: Registry[PoolKind] = Registry("runner")


def register(kind: str, make: PoolKind) -> None:
    POOL_KINDS.register(kind, make)


def pool_factory(kind: str, options: Any = None) -> PoolFactory:
    return POOL_KINDS.get(kind)(options)


def _kubernetes(options: Any) -> PoolFactory:
    from tether.runner.k8s.pool import kubernetes_pools  # the Kubernetes client loads only when used

    return kubernetes_pools(options)


def _ray(options: Any) -> PoolFactory:
    from tether.runner.ray_pool import RayPool  # Ray loads only when `--ray` places the agents

    return RayPool.factory(options.cluster, options.authority, options.announce)


register("local", lambda options: WorkerPool)
register("k8s", _kubernetes)
register("ray", _ray)  # chosen by `--ray` (tether.placement.ray), not by `--runner`
PLACED_KINDS = ("ray",)
