"""The rollout's reward: one rule, used by the runner, metrics, validation, the adapters and prompt search.

The final reward of an attempt is, among the rollout's rewards that are
- primary (`primary=True`; an evaluator's dict names its primary entry with `--primary-reward`),
- not linked to a span (a span-linked reward is a step reward, whatever its `primary` flag),
- of that attempt, or of no attempt (`attempt=None` counts for every attempt),
- and named `name` when a name is asked for,
the one the store recorded last. The reward's own `time` is not used: it is whatever the sender said.
The runner writes the evaluator's rewards after the agent process has exited, so an evaluator's verdict
wins over whatever the agent reported during its run.

Rewards the agent reported itself (source `agent`: whatever arrived with its rollout token) count only
when the run lets them: `Rollout.metadata["agent_rewards"]`, set by the runner, by default true only for
runs without an evaluator. An agent under training must not be able to grade itself.

The rollout's reward is the final reward of its last attempt (the one that finished it): rewards of
earlier, retried attempts do not count. None means the rollout has no final reward; training then
uses 0.0 and counts it (`rollouts_without_reward`).
"""

from __future__ import annotations

from collections.abc import Sequence

from tether.contracts import Meta, Origin
from tether.store.base import Store
from tether.store.records import Reward, Rollout


def _of_attempt(reward: Reward, attempt: int | None, agent_rewards: bool) -> bool:
    """An unlinked reward of that attempt (or of none), from a source the rollout lets count."""
    return (
        reward.span_id is None
        and (reward.attempt is None or reward.attempt == attempt)
        and (agent_rewards or reward.source != Origin.AGENT)
    )


def final_reward(
    rewards: Sequence[Reward], attempt: int | None, name: str | None = None, *, agent_rewards: bool = True
) -> float | None:
    """The final reward of `attempt`, from rewards in store insertion order (as `query_rewards` gives)."""
    for reward in reversed(rewards):
        primary = reward.primary and (name is None or reward.name == name)
        if primary and _of_attempt(reward, attempt, agent_rewards):
            return reward.value
    return None


def named_reward(
    rewards: Sequence[Reward], attempt: int | None, name: str, *, agent_rewards: bool = True
) -> float | None:
    """The last reward named `name` of `attempt`, primary or not (a reward kept beside the final one, such
    as an evaluator's score next to the judge's a run trains on); never a span-linked step reward."""
    for reward in reversed(rewards):
        if reward.name == name and _of_attempt(reward, attempt, agent_rewards):
            return reward.value
    return None


def agent_rewards_count(rollout: Rollout) -> bool:
    return bool(rollout.metadata.get(Meta.AGENT_REWARDS, True))


def rollout_final_reward(
    rollout: Rollout, rewards: Sequence[Reward], attempt: int | None, name: str | None = None
) -> float | None:
    """The final reward of one of the rollout's attempts, under the rollout's own agent-reward setting."""
    return final_reward(rewards, attempt, name, agent_rewards=agent_rewards_count(rollout))


def rollout_reward(store: Store, rollout: Rollout, name: str | None = None) -> float | None:
    """The reward of a rollout, read from the store."""
    return rollout_final_reward(rollout, store.query_rewards(rollout.id), rollout.attempt_count or None, name)
