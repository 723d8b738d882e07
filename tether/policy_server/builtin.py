"""The built-in policy server: Tether's own engine (`TransformersEngine`) in this process.

It swaps LoRA adapters between decoding batches, so no generation ever mixes two versions and pause and
resume have nothing to do. Several policies (`policy_upstream`, `load_policy`) are adapters of one engine,
decoded in one batch. Full-model weights would need a second copy of the model in memory: they are
refused with a clear error (serve full fine-tuning with an external server).
"""

from __future__ import annotations

from tether.gateway.upstreams import EngineUpstream, Upstream
from tether.policy_server.base import PolicyWeights


class BuiltinPolicyServer:
    def __init__(
        self, model: str, *, name: str = "policy", max_batch_size: int = 8, threads: int | None = None
    ) -> None:
        from tether.engines.transformers_engine import TransformersEngine

        self.engine = TransformersEngine(model, max_batch_size=max_batch_size, threads=threads)
        self._upstream = EngineUpstream(self.engine, name=name)
        self._policies: dict[str, EngineUpstream] = {}

    @property
    def policy_version(self) -> int:
        return self.engine.policy_version

    def upstream(self) -> Upstream:
        return self._upstream

    async def load(self, weights: PolicyWeights) -> int:
        _check_lora(weights)
        return await self.engine.aload_adapter(str(weights.path), weights.version)

    def policy_upstream(self, policy: str) -> Upstream:
        """Policies share the engine (one batch, the base weights once); each has its own upstream."""
        if policy not in self._policies:
            self._policies[policy] = EngineUpstream(
                self.engine, name=policy, policy=policy, closes_engine=False
            )
        return self._policies[policy]

    def version_of(self, policy: str) -> int:
        return self.engine.version_of(policy)

    async def load_policy(self, weights: PolicyWeights, policy: str) -> int:
        _check_lora(weights)
        return await self.engine.aload_adapter(str(weights.path), weights.version, policy)

    async def pause(self) -> None:
        return None  # adapters swap between batches: nothing to hold

    async def resume(self) -> None:
        return None

    def close(self) -> None:
        self.engine.close()


def _check_lora(weights: PolicyWeights) -> None:
    if weights.kind != "lora":
        raise ValueError(
            "the built-in engine hot-swaps LoRA adapters only; train with LoRA, or serve full "
            "fine-tuning from an external policy server"
        )
