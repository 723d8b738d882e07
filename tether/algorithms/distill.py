"""On-policy distillation: a teacher scores the tokens the student sampled, and the per-token reverse KL
is the advantage.

The student minimises KL(pi_s || pi_t) = E_{y ~ pi_s}[log pi_s(y) - log pi_t(y)] over its own samples.
As a policy gradient, every sampled token t earns the reward

    A_t = log pi_t(y_t | prefix) - log mu(y_t | prefix)

with mu the behaviour logprob the engine recorded when it drew the token, and no discounting across
tokens: a token the teacher finds likelier than the student did is pushed up, one it finds unlikely is
pushed down, whatever the task's reward. No group baseline is needed, so a group of one rollout works
and a batch never loses its signal to equal rewards.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tether.adapters.transitions import Transition
from tether.algorithms.advantages import (
    AdvantageBatch,
    AdvantageReport,
    calls_by_rollout,
    group_key,
    refuse_demonstrations,
    refuse_unreproducible_sampling,
    rollout_returns,
    weighted_samples,
)

METHOD = "opd"


def token_advantages(transition: Transition, teacher: Sequence[float]) -> list[float]:
    """A_t for each response token of `transition` (0 where the loss mask is 0: tool output, the next
    user turn), from the teacher's logprobs of the same tokens."""
    if len(teacher) != len(transition.response_ids):
        raise ValueError(
            f"rollout {transition.rollout_id!r} call {transition.call_index}: the teacher scored "
            f"{len(teacher)} tokens of a {len(transition.response_ids)}-token response"
        )
    return [
        float(t) - float(mu) if trained else 0.0
        for t, mu, trained in zip(teacher, transition.response_logprobs, transition.loss_mask, strict=True)
    ]


def distill_advantages(
    transitions: Sequence[Transition], teacher: Sequence[Sequence[float]]
) -> tuple[AdvantageBatch, float]:
    """Samples whose advantages are the per-token reverse KL, each rollout weighted once (as the other
    methods), and the batch's mean reverse KL per trained token (student minus teacher, nats)."""
    items = list(transitions)
    refuse_demonstrations(items)
    refuse_unreproducible_sampling(items)
    if len(teacher) != len(items):
        raise ValueError(f"teacher logprobs for {len(teacher)} of {len(items)} transitions")
    rollouts = calls_by_rollout(items)
    report = AdvantageReport(method=METHOD, gamma=0.0, per_call_returns=False)
    report.transitions, report.rollouts = len(items), len(rollouts)
    report.groups = len({group_key(calls[0]) for calls in rollouts.values()})
    per_token = {id(t): token_advantages(t, scores) for t, scores in zip(items, teacher, strict=True)}
    trained = {id(t): [a for a, m in zip(per_token[id(t)], t.loss_mask, strict=True) if m] for t in items}
    samples = weighted_samples(items, {key: _mean(values) for key, values in trained.items()})
    for sample in samples:
        sample.token_advantages = per_token[id(sample.transition)]
    report.groups_used = len({group_key(s.transition) for s in samples})
    report.rollouts_used = len({s.rollout_id for s in samples})
    report.samples = len(samples)
    report.empty_transitions = len(items) - len(samples)
    returns = rollout_returns(items)
    report.mean_return = math.fsum(returns.values()) / len(returns) if returns else 0.0
    gaps = [a for s in samples for a in trained[id(s.transition)]]
    report.mean_abs_advantage = _mean([abs(a) for a in gaps])
    reverse_kl = -_mean(gaps)
    return AdvantageBatch(samples=samples, report=report, returns=returns), reverse_kl


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else 0.0
