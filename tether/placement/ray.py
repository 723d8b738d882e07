"""The Ray placement: agents in rollout-worker actors, the policy server as replica actors
(`--replicas`), the learner as rank actors (`--learner-ranks`), on the cluster `--ray` joined. Each part
prints where its actors run once they are placed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from rich.console import Console

from tether.ray.cluster import ActorPlacement, RayCluster, placement_table

if TYPE_CHECKING:
    from tether.learner.config import TrainConfig
    from tether.learner.ray_learner import RayLearner
    from tether.policy_server import PolicyServer, PolicyServerOptions
    from tether.runner.runner import PoolFactory
    from tether.store.auth import TokenAuthority


class RayPlacement:
    def __init__(self, cluster: RayCluster, console: Console | None = None) -> None:
        self.cluster = cluster
        self.console = console or Console(stderr=True)

    @property
    def host(self) -> str:
        return self.cluster.bind_host

    def pools(self, authority: TokenAuthority, local: PoolFactory | None) -> PoolFactory:
        from tether.runner.pools import pool_factory
        from tether.runner.ray_pool import RayPoolOptions

        return pool_factory("ray", RayPoolOptions(self.cluster, authority, self._announce_workers))

    def policy_server(self, kind: str, options: PolicyServerOptions) -> PolicyServer | None:
        """`--replicas N`: N replica actors, each its own server of `kind`, behind one sticky upstream."""
        replicas = self.cluster.settings.replicas
        if not replicas:
            return None
        from tether.policy_server.ray_replicas import ReplicaSet

        options = replace(options, vllm=replace(options.vllm, replicas=1, port=0))  # one server per actor
        with self.console.status(f"starting {replicas} {kind} replica(s) of {options.model} ..."):
            server = ReplicaSet(self.cluster, kind, options, replicas, self.cluster.gpus_per_replica())
            placed = server.placements()
        self.report(placed)
        return server

    def learner(self, config: TrainConfig) -> RayLearner | None:
        """`--learner-ranks N` (N > 1): N rank actors forming one torch.distributed group."""
        settings = self.cluster.settings
        if settings.learner_ranks <= 1:
            return None
        from tether.learner.ray_learner import RayLearner

        learner = RayLearner(config, settings.learner_ranks, self.cluster, settings.learner_sharding)
        self.report(learner.placements())
        held, whole = learner.held()[0]
        self.console.print(
            f"  learner: {settings.learner_sharding}, each rank holds {held:,} of {whole:,} parameters"
        )
        return learner

    def _announce_workers(self, placed: Sequence[ActorPlacement], expected: int) -> None:
        pending = expected - len(placed)
        extra = [f"{pending} rollout worker(s) pending: no node has the resources they ask for"]
        self.report(placed, extra if pending > 0 else [])

    def report(self, placements: Sequence[ActorPlacement], extra: Sequence[str] = ()) -> None:
        """Print which actor runs where; workers Ray has not placed yet are said to be pending."""
        self.console.print("[bold]placement[/]")
        for line in [*placement_table(placements), *extra]:
            self.console.print(f"  {line}")
