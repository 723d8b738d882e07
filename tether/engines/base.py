"""What the gateway needs from a model engine that runs in the same process.

An engine takes prompt token ids and produces generated token ids with their policy logprobs, each the
log-probability of the token under the distribution it was drawn from (temperature, top-k and top-p
applied: `tether.engines.sampling`), so that training never has to re-tokenize text and the learner can
score the same distribution.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from tether.contracts import POLICY_UPSTREAM
from tether.sampling import Sampler

# The policy a request samples from when it names none: the one a single-policy run trains.
DEFAULT_POLICY = POLICY_UPSTREAM


@dataclass
class SamplingParams:
    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    top_k: int = 0  # 0: no top-k cut

    @property
    def sampler(self) -> Sampler:
        """The distribution the engine draws from (and records logprobs under)."""
        return Sampler(self.temperature, self.top_p, self.top_k)


@dataclass
class GeneratedToken:
    """One step of a streamed generation. `text` is the newly decodable text (may be empty)."""

    token_id: int
    logprob: float
    text: str


@dataclass
class Generation:
    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str  # "stop" or "length"


@dataclass
class GenerationDone:
    """The last item of a stream: the whole generation as it will be recorded."""

    generation: Generation
    policy_version: int


class Engine(Protocol):
    """What the gateway's engine upstream and the trainer use of an in-process engine."""

    max_context: int  # prompt plus completion, in tokens

    @property
    def policy_version(self) -> int:
        """The version the default policy generates with from now on (0: the base model)."""
        ...

    def version_of(self, policy: str) -> int:
        """The version of a named policy (several LoRA adapters share the base weights)."""
        ...

    def chat_prompt_ids(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = None,
    ) -> list[int]:
        """Render chat messages with the model's chat template (generation prompt added) into token ids.

        `tools` are rendered as `tether.models.tools` describes; `tool_choice` is `"required"`, a named
        function (`{"type": "function", "function": {"name": ...}}`) or None.
        """
        ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, token_ids: list[int]) -> str: ...

    async def generate(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        *,
        owner: str | None = None,
        policy: str = DEFAULT_POLICY,
    ) -> tuple[Generation, int]:
        """Generate one completion with `policy`. Returns it with the policy version that produced it.

        `owner` names whom the request is for (the gateway passes the rollout id): an engine shares
        its batch fairly across owners, so that one owner's long requests do not starve another's.
        """
        ...

    def stream(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        *,
        owner: str | None = None,
        policy: str = DEFAULT_POLICY,
    ) -> AsyncIterator[GeneratedToken | GenerationDone]:
        """Generate one completion token by token; the final item is a GenerationDone. `owner` is as
        for `generate`."""
        ...

    async def score(self, token_ids: list[int], policy: str = DEFAULT_POLICY) -> list[float]:
        """The log-probability of each token after the first given the ones before it, under the
        policy's unprocessed distribution (temperature 1, no cut): what a teacher tells a student in
        on-policy distillation. One value fewer than `token_ids`."""
        ...

    async def aload_adapter(
        self, adapter_path: str, policy_version: int | None = None, policy: str = DEFAULT_POLICY
    ) -> int:
        """Make a LoRA adapter what `policy` samples from, between generations (each one is produced by
        exactly one version); returns its new version (`policy_version`, or the current one plus one)."""
        ...

    def close(self) -> None:
        """Stop the engine (blocking until its worker has stopped); later generations fail."""
        ...
