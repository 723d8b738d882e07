"""Any OpenAI-compatible server as the policy (`--upstream URL`): Tether routes and records its calls but
does not manage it, so it serves one fixed model and is never trained."""

from __future__ import annotations

from dataclasses import dataclass

from tether.gateway.upstreams import HTTPUpstream, HTTPUpstreamConfig, Upstream
from tether.policy_server.base import PolicyServerError, PolicyWeights


@dataclass(frozen=True)
class OpenAIOptions:
    base_url: str
    api_key: str | None = None
    model: str | None = None  # the model name sent upstream (default: the one the agent asked for)
    token_ids: bool = False  # ask for token ids (vLLM's return_token_ids)


class OpenAIPolicyServer:
    def __init__(self, options: OpenAIOptions, *, name: str) -> None:
        self._upstream = HTTPUpstream(
            HTTPUpstreamConfig(
                name=name,
                base_url=options.base_url,
                api_key=options.api_key,
                model=options.model,
                request_token_ids=options.token_ids,
            )
        )

    @property
    def policy_version(self) -> int | None:
        return None  # a model Tether does not manage has no version of Tether's; its calls record none

    def upstream(self) -> Upstream:
        return self._upstream

    async def load(self, weights: PolicyWeights) -> int:
        raise PolicyServerError(
            "--upstream serves a model Tether does not manage: it cannot load trained weights. "
            "Train with the built-in engine or vLLM (--engine vllm, or --policy-server URL)"
        )

    async def pause(self) -> None:
        return None

    async def resume(self) -> None:
        return None

    def close(self) -> None:
        return None  # the gateway closes the upstream's connections


__all__ = ["OpenAIOptions", "OpenAIPolicyServer"]
