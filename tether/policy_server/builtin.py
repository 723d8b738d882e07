"""The built-in policy server: Tether's own engine (`TransformersEngine`) in this process.

It swaps LoRA adapters between decoding batches, so no generation ever mixes two versions and pause and
resume have nothing to do. Full-model weights would need a second copy of the model in memory: they are
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

    @property
    def policy_version(self) -> int:
        return self.engine.policy_version

    def upstream(self) -> Upstream:
        return self._upstream

    async def load(self, weights: PolicyWeights) -> int:
        if weights.kind != "lora":
            raise ValueError(
                "the built-in engine hot-swaps LoRA adapters only; train with LoRA, or serve full "
                "fine-tuning from an external policy server"
            )
        return await self.engine.aload_adapter(str(weights.path), weights.version)

    async def pause(self) -> None:
        return None  # adapters swap between batches: nothing to hold

    async def resume(self) -> None:
        return None

    def close(self) -> None:
        self.engine.close()
