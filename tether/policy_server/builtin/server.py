"""The built-in policy server: Tether's own engine (`TransformersEngine`) in this process.

It swaps LoRA adapters between decoding batches, so no generation ever mixes two versions and pause and
resume have nothing to do. Several policies (`policy_upstream`, `load_policy`) are adapters of one engine,
decoded in one batch. Full-model weights would need a second copy of the model in memory: they are
refused with a clear error (serve full fine-tuning with an external server).
"""

from __future__ import annotations

from pathlib import Path

from tether.gateway.upstreams import Upstream
from tether.policy_server.base import PolicyServerError, PolicyWeights, folder_version
from tether.policy_server.builtin.options import BuiltinOptions
from tether.policy_server.builtin.upstream import EngineUpstream


class BuiltinPolicyServer:
    def __init__(self, model: str, options: BuiltinOptions | None = None, *, name: str = "policy") -> None:
        options = options or BuiltinOptions()
        try:
            from tether.engines.transformers_engine import TransformersEngine
        except ImportError as exc:
            raise PolicyServerError(
                f"the built-in engine needs torch and transformers ({exc}). "
                "Install them with: pip install torch==2.13.0 && pip install -e '.[engine]'"
            ) from exc
        try:
            self.engine = TransformersEngine(
                model,
                max_batch_size=options.max_batch_size,
                threads=options.threads,
                prefix_cache_mb=options.prefix_cache_mb,
            )
        except (ValueError, FileNotFoundError, RuntimeError) as exc:
            raise PolicyServerError(f"cannot load model {model!r}: {exc}") from exc
        if options.adapter is not None:
            self._serve_adapter(options.adapter)
        self._upstream = EngineUpstream(self.engine, name=name)
        self._policies: dict[str, EngineUpstream] = {}

    def _serve_adapter(self, adapter: Path) -> None:
        """`tether serve --adapter DIR`: the model with this LoRA adapter, from the start."""
        if not (adapter / "adapter_config.json").is_file():
            self.engine.close()
            raise PolicyServerError(f"--adapter {adapter}: no LoRA adapter there (no adapter_config.json)")
        try:
            self.engine.load_adapter(str(adapter), folder_version(adapter))
        except (ValueError, RuntimeError, OSError) as exc:
            self.engine.close()
            raise PolicyServerError(
                f"--adapter {adapter}: cannot load it onto {self.engine.name}: {exc}"
            ) from None

    @property
    def policy_version(self) -> int:
        return self.engine.policy_version

    def prefill_stats(self) -> dict[str, int]:
        """The engine's prompt tokens requested, prefilled and reused (`TransformersEngine.prefill_stats`)."""
        return self.engine.prefill_stats()

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
        raise PolicyServerError(
            "the built-in engine hot-swaps LoRA adapters only; train with LoRA, or serve full "
            "fine-tuning from an external policy server"
        )
