"""One reward rule: what the runner's outcomes (metrics, validation, prompt search) report is what the
transitions (training) use, for several rewards, named ones, span-linked ones and retried attempts."""

from __future__ import annotations

import pytest

from tests.adapters.calls import call_span, retried_rollout, reward, running_rollout
from tether.adapters import build_transitions
from tether.runner.driver import read_outcome
from tether.store import RolloutStatus, SQLiteStore, final_reward
from tether.store.records import Reward

P1 = [1, 10, 11, 12]
R1 = [20, 21, 2]


@pytest.fixture
def store() -> SQLiteStore:
    return SQLiteStore.in_memory()


def agreed(store: SQLiteStore, rollout_id: str, attempt: int) -> float | None:
    """Finish the rollout; the reward its outcome reports, checked against its transitions."""
    store.update_status(rollout_id, RolloutStatus.succeeded, attempt=attempt)
    outcome = read_outcome(store, store.get_rollout(rollout_id))
    report = build_transitions(store, [rollout_id])
    assert [t.reward for t in report.transitions] == [0.0 if outcome.reward is None else outcome.reward]
    assert report.rollouts_without_reward == (outcome.reward is None)
    return outcome.reward


def test_the_last_recorded_primary_wins_over_one_claiming_a_later_time(store: SQLiteStore) -> None:
    rollout = running_rollout(store)
    store.add_spans([call_span(rollout.id, P1, R1)])
    store.add_rewards(
        [
            reward(rollout.id, 1000.0, source="evaluator", time=4e9),  # what an agent could forge
            reward(rollout.id, 0.5, source="evaluator"),
            reward(rollout.id, 9.0, primary=False),
        ]
    )
    assert agreed(store, rollout.id, 1) == 0.5


def test_span_linked_rewards_are_step_rewards_never_the_final_one(store: SQLiteStore) -> None:
    rollout = running_rollout(store)
    span = call_span(rollout.id, P1, R1)
    store.add_spans([span])
    store.add_rewards([reward(rollout.id, 0.25), reward(rollout.id, 7.0, span_id=span.span_id)])
    assert agreed(store, rollout.id, 1) == 0.25


def test_only_the_finishing_attempts_rewards_count(store: SQLiteStore) -> None:
    rollout = retried_rollout(store)
    store.add_spans([call_span(rollout.id, P1, R1, attempt=2)])
    store.add_rewards([reward(rollout.id, 0.75, attempt=2), reward(rollout.id, 1.0, attempt=1)])
    assert agreed(store, rollout.id, 2) == 0.75


def test_a_reward_of_no_attempt_counts_for_the_last_and_none_is_none(store: SQLiteStore) -> None:
    rollout = running_rollout(store)
    store.add_spans([call_span(rollout.id, P1, R1)])
    assert agreed(store, rollout.id, 1) is None
    other = running_rollout(store)
    store.add_spans([call_span(other.id, P1, R1)])
    store.add_rewards([reward(other.id, 0.5, attempt=None)])
    assert agreed(store, other.id, 1) == 0.5


def test_names_filter_only_when_asked() -> None:
    rewards = [
        Reward(rollout_id="r", value=1.0, name="reward"),
        Reward(rollout_id="r", value=2.0, name="judge"),
        Reward(rollout_id="r", value=3.0, name="reward", primary=False),
    ]
    assert final_reward(rewards, 1) == 2.0
    assert final_reward(rewards, 1, "reward") == 1.0
    assert final_reward(rewards, 1, "missing") is None
