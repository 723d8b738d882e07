from __future__ import annotations

import math

import pytest

from tether.adapters.transitions import Transition
from tether.algorithms import assign_advantages, group_advantages, rewards_to_go, rollout_returns


def make(
    rollout: str,
    reward: float,
    *,
    group: str | None = "g",
    task: str = "task",
    call: int = 0,
    step_reward: float = 0.0,
    mask: list[int] | None = None,
) -> Transition:
    mask = [1, 1] if mask is None else mask
    return Transition(
        rollout_id=rollout,
        task_id=task,
        group_id=group,
        attempt=None,
        call_index=call,
        agent=None,
        policy_version=0,
        prompt_ids=[1, 2],
        response_ids=[3] * len(mask),
        response_logprobs=[-1.0] * len(mask),
        loss_mask=mask,
        reward=reward,
        step_reward=step_reward,
    )


def test_group_advantages_hand_computed() -> None:
    values = [1.0, 2.0, 3.0, 6.0]  # mean 3, population variance (4 + 1 + 0 + 9) / 4 = 3.5
    std = math.sqrt(3.5)
    assert group_advantages(values, "grpo") == pytest.approx([d / (std + 1e-6) for d in (-2, -1, 0, 3)])
    assert group_advantages(values, "drgrpo") == pytest.approx([-2.0, -1.0, 0.0, 3.0])
    # r - mean of the others: 1 - 11/3, 2 - 10/3, 3 - 9/3, 6 - 6/3
    assert group_advantages(values, "rloo") == pytest.approx([-8 / 3, -4 / 3, 0.0, 4.0])
    assert group_advantages([1.0, 0.0], "grpo", eps=0.0) == pytest.approx([1.0, -1.0])


def test_group_advantages_edge_cases() -> None:
    assert group_advantages([], "grpo") == []
    assert group_advantages([5.0], "grpo") == [0.0]
    assert group_advantages([5.0], "rloo") == [0.0]
    assert group_advantages([2.0, 2.0], "grpo") == [0.0, 0.0]
    with pytest.raises(ValueError, match="unknown advantage method"):
        group_advantages([1.0], "ppo")  # type: ignore[arg-type]


def test_returns_discount_step_rewards_over_call_order() -> None:
    # Calls given out of order; per-call rewards are [0.5, 0, 1 + 2 (final)].
    calls = [
        make("r", 2.0, call=2, step_reward=1.0),
        make("r", 2.0, call=0, step_reward=0.5),
        make("r", 2.0, call=1, step_reward=0.0),
    ]
    assert rollout_returns(calls) == {"r": pytest.approx(3.5)}
    assert rollout_returns(calls, gamma=0.5) == {"r": pytest.approx(0.5 + 0.25 * 3.0)}
    ordered = sorted(calls, key=lambda t: t.call_index)
    assert rewards_to_go(ordered, gamma=0.5) == pytest.approx([1.25, 1.5, 3.0])
    assert rollout_returns([make("x", 1.0), make("y", 0.0)]) == {"x": 1.0, "y": 0.0}


def test_rollout_advantage_is_broadcast_and_weights_normalise_per_rollout() -> None:
    long = [
        make("a", 1.0, call=0, mask=[1, 1]),
        make("a", 1.0, call=1, mask=[1, 0, 1, 1]),
        make("a", 1.0, call=2, mask=[1, 1, 1, 1, 1]),
    ]
    short = [make("b", 0.0, mask=[1, 1, 1])]
    batch = assign_advantages(long + short, method="grpo")
    by_rollout: dict[str, list] = {}
    for sample in batch.samples:
        by_rollout.setdefault(sample.rollout_id, []).append(sample)
    expected = 0.5 / (0.5 + 1e-6)
    assert [s.advantage for s in by_rollout["a"]] == pytest.approx([expected] * 3)
    assert [s.advantage for s in by_rollout["b"]] == pytest.approx([-expected])
    # Each call's share of its rollout's trained tokens (2, 3, 5 of 10): weights sum to 1 per rollout.
    assert [s.weight for s in by_rollout["a"]] == pytest.approx([0.2, 0.3, 0.5])
    assert sum(s.weight for s in by_rollout["a"]) == pytest.approx(sum(s.weight for s in by_rollout["b"]))
    assert [s.transition for s in batch.samples] == long + short
    assert batch.returns == {"a": 1.0, "b": 0.0}
    report = batch.report
    assert (report.groups, report.groups_used, report.rollouts_used, report.samples) == (1, 1, 2, 4)


def test_zero_variance_groups_dropped_or_kept() -> None:
    items = [
        make("a", 1.0, group="mixed"),
        make("b", 0.0, group="mixed"),
        make("c", 1.0, group="solved"),
        make("d", 1.0, group="solved"),
        make("e", 0.5, group="alone"),
    ]
    dropped = assign_advantages(items)
    assert {s.rollout_id for s in dropped.samples} == {"a", "b"}
    report = dropped.report
    assert (report.groups, report.groups_used, report.groups_zero_variance) == (3, 1, 2)
    assert (report.groups_dropped, report.groups_singleton, report.rollouts_used) == (2, 1, 2)

    kept = assign_advantages(items, drop_zero_variance=False)
    assert {s.rollout_id for s in kept.samples} == {"a", "b", "c", "d", "e"}
    assert {s.rollout_id: s.advantage for s in kept.samples if s.rollout_id in "cde"} == {
        "c": 0.0,
        "d": 0.0,
        "e": 0.0,
    }
    assert (kept.report.groups_used, kept.report.groups_dropped, kept.report.groups_zero_variance) == (
        3,
        0,
        2,
    )


def test_groups_fall_back_to_task_id() -> None:
    items = [make("a", 1.0, group=None, task="t1"), make("b", 0.0, group=None, task="t1")]
    items.append(make("c", 1.0, group=None, task="t2"))
    batch = assign_advantages(items, method="drgrpo")
    assert {s.rollout_id: s.advantage for s in batch.samples} == {"a": 0.5, "b": -0.5}
    assert batch.report.groups == 2 and batch.report.groups_singleton == 1


def test_per_call_returns_use_reward_to_go_pooled_in_the_group() -> None:
    items = [
        make("a", 1.0, call=0, step_reward=1.0),  # G = [2, 1]
        make("a", 1.0, call=1),
        make("b", 0.0, call=0),  # G = [0]
    ]
    batch = assign_advantages(items, method="drgrpo", per_call_returns=True)
    assert [s.advantage for s in batch.samples] == pytest.approx([1.0, 0.0, -1.0])  # pooled mean is 1
    rollout_level = assign_advantages(items, method="drgrpo")
    assert [s.advantage for s in rollout_level.samples] == pytest.approx([1.0, 1.0, -1.0])


def test_rloo_method_and_empty_transitions() -> None:
    items = [make("a", 1.0), make("a", 1.0, call=1, mask=[0, 0]), make("b", 0.0), make("c", 0.0)]
    batch = assign_advantages(items, method="rloo")
    assert [(s.rollout_id, s.advantage, s.weight) for s in batch.samples] == [
        ("a", pytest.approx(1.0), 1.0),
        ("b", pytest.approx(-0.5), 1.0),
        ("c", pytest.approx(-0.5), 1.0),
    ]
    assert batch.report.empty_transitions == 1 and batch.report.transitions == 4


def test_invalid_inputs() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        assign_advantages([make("a", math.nan), make("b", 0.0)])
    with pytest.raises(ValueError, match="unknown advantage method"):
        assign_advantages([make("a", 1.0)], method="ppo")  # type: ignore[arg-type]
    empty = assign_advantages([])
    assert empty.samples == [] and empty.report.groups == 0
