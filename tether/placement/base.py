"""Where a command's parts run: the agents' pools, the policy server and the learner.

    placement = LocalPlacement()            # everything in this process (the default)
    placement = RayPlacement(cluster)       # tether.placement.ray: actors on a Ray cluster

`rollout`, `optimize-prompt` and `train` (and `Trainer`) ask the placement, and open their own part
where it answers None. Adding a placement is one class with these four methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tether.learner.base import Learner
    from tether.learner.config import TrainConfig
    from tether.policy_server import PolicyServer, PolicyServerOptions
    from tether.runner.runner import PoolFactory
    from tether.store.auth import TokenAuthority

LOOPBACK_HOST = "127.0.0.1"


class Placement(Protocol):
    @property
    def host(self) -> str:
        """Where the gateway listens: agents placed elsewhere must reach it there."""
        ...

    def pools(self, authority: TokenAuthority, local: PoolFactory | None) -> PoolFactory | None:
        """The runner's pool factory; `local` is the command's own (`--runner`; None: worker processes)."""
        ...

    def policy_server(self, kind: str, options: PolicyServerOptions) -> PolicyServer | None:
        """A policy server placed here (replicas), or None: the command opens its own."""
        ...

    def learner(self, config: TrainConfig) -> Learner | None:
        """A learner placed here (ranks), or None: the trainer opens its own."""
        ...


@dataclass(frozen=True)
class LocalPlacement:
    """Everything on this machine: the gateway on loopback, the command's own pools, server and learner."""

    host: str = LOOPBACK_HOST

    def pools(self, authority: TokenAuthority, local: PoolFactory | None) -> PoolFactory | None:
        return local

    def policy_server(self, kind: str, options: PolicyServerOptions) -> PolicyServer | None:
        return None

    def learner(self, config: TrainConfig) -> Learner | None:
        return None
