"""The rollout's reward: one rule, used by the runner, metrics, validation, the adapters and prompt search.

The final reward of an attempt is, among the rollout's rewards that are
- primary (`primary=True`; an evaluator's dict names its primary entry with `--primary-reward`),
- not linked to a span (a span-linked reward is a step reward, whatever its `primary` flag),
- of that attempt, or of no attempt (`attempt=None` counts for every attempt),
- and named `name` when a name is asked for,
the one the store recorded last. The reward's own `time` is not used: it is whatever the sender said.
The runner writes the evaluator's rewards after the agent process has exited, so an evaluator's verdict
wins over whatever the agent reported during its run.

The rollout's reward is the final reward of its last attempt (the one that finished it): rewards of
earlier, retried attempts do not count. None means the rollout has no final reward; training then
uses 0.0 and counts it (`rollouts_without_reward`).
"""

from __future__ import annotations

from collections.abc import Sequence

from tether.store.base import Store
from tether.store.models import Reward, Rollout


def is_final_candidate(reward: Reward, attempt: int | None, name: str | None = None) -> bool:
    return (
        reward.primary
        and reward.span_id is None
        and (name is None or reward.name == name)
        and (reward.attempt is None or reward.attempt == attempt)
    )


def final_reward(rewards: Sequence[Reward], attempt: int | None, name: str | None = None) -> float | None:
    """The final reward of `attempt`, from rewards in store insertion order (as `query_rewards` gives)."""
    for reward in reversed(rewards):
        if is_final_candidate(reward, attempt, name):
            return reward.value
    return None


def rollout_reward(store: Store, rollout: Rollout, name: str | None = None) -> float | None:
    """The reward of a rollout, read from the store."""
    return final_reward(store.query_rewards(rollout.id), rollout.attempt_count or None, name)
