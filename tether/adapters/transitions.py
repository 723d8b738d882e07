"""A transition: one single-turn training sample built from a rollout's recorded model calls."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from tether.sampling import RAW, Sampler


@dataclass
class Transition:
    """Prompt and response token ids exactly as the policy saw and produced them.

    `response_ids`, `response_logprobs` and `loss_mask` have the same length. When consecutive calls are
    merged into one sequence, the tokens between two responses (tool output, the next user turn) are part
    of the response with loss mask 0 and logprob 0.0: they are context, not actions.
    """

    rollout_id: str
    task_id: str
    group_id: str | None
    attempt: int | None
    call_index: int
    agent: str | None
    policy_version: int | None
    prompt_ids: list[int]
    response_ids: list[int]
    response_logprobs: list[float]
    loss_mask: list[int]
    reward: float = 0.0
    step_reward: float = 0.0
    span_ids: list[str] = field(default_factory=list)
    mode: str = "train"
    # Another model's text tokenized with the policy's chat template (`Meta.DEMONSTRATION`): no recorded
    # logprobs, trained on by supervised imitation only, never in an RL batch.
    demonstration: bool = False
    # The distribution the response tokens were drawn from and their logprobs are under; the learner
    # scores them under the same one (`tether.sampling`).
    sampler: Sampler = RAW
    # Per response token, the policy version of the call that generated it (None for context tokens and
    # for calls of unknown version); empty when no call's version is known. A merged transition's calls
    # may come from different versions: staleness is judged per token (`stale_tokens_masked`).
    response_versions: list[int | None] = field(default_factory=list)
    # The policy (the gateway upstream) whose calls these are; in a run of several policies each policy's
    # update trains only its own transitions.
    policy: str | None = None

    @property
    def merged_calls(self) -> int:
        return len(self.span_ids)

    @property
    def trained_tokens(self) -> int:
        return sum(self.loss_mask)

    def trained_versions(self) -> list[int]:
        """The known policy versions of the trained tokens, one per token."""
        if not self.response_versions:
            return []
        pairs = zip(self.loss_mask, self.response_versions, strict=True)
        return [version for mask, version in pairs if mask and version is not None]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Transition:
        fields = dict(data)
        fields["sampler"] = Sampler.from_attr(fields.get("sampler"))
        return cls(**fields)
