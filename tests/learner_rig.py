"""A small batch for learner tests: rollouts of unequal weights and sizes, on the tiny random model."""

from __future__ import annotations

import torch

from tether.adapters.transitions import Transition
from tether.algorithms import AdvantageBatch, assign_advantages

PROMPT = [1, 9690, 198, 1348, 314, 216, 34, 30, 34, 47, 2, 198]


def transition(
    rollout: str,
    response: list[int],
    reward: float,
    call: int = 0,
    extra: int = 0,
    logprob: float = -1.5,
    prompt: list[int] | None = None,
    mask: list[int] | None = None,
) -> Transition:
    """A call of `rollout` after `prompt` (default: `PROMPT` and `extra` more tokens)."""
    return Transition(
        rollout_id=rollout,
        task_id="task",
        group_id="g",
        attempt=None,
        call_index=call,
        agent=None,
        policy_version=0,
        prompt_ids=list(PROMPT if prompt is None else prompt) + list(range(400, 400 + extra)),
        response_ids=list(response),
        response_logprobs=[logprob] * len(response),
        loss_mask=[1] * len(response) if mask is None else mask,
        reward=reward,
    )


def transitions(logprob: float = -1.5) -> list[Transition]:
    """Four rollouts of one group; one made three calls (its weights split three ways), lengths all differ."""
    return [
        transition("a", [2131, 4387, 3658, 2], 1.0, logprob=logprob),
        transition("b", [28, 9981, 555], 0.0, extra=9, logprob=logprob),
        transition("c", [77, 78], 1.0, call=0, extra=3, logprob=logprob),
        transition("c", [79, 80, 81, 82, 83], 1.0, call=1, extra=20, logprob=logprob),
        transition("c", [84], 1.0, call=2, extra=31, logprob=logprob),
        transition("d", [900, 901, 902, 903, 904, 905], 0.0, extra=5, logprob=logprob),
    ]


def batch() -> AdvantageBatch:
    return assign_advantages(transitions())


def params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def assert_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-6, msg=name)
