"""build_transitions over spans and rewards written to a real SQLite store."""

from __future__ import annotations

import pytest

from tests.adapters.calls import (
    call_span,
    logprobs_for,
    retried_rollout,
    reward,
    running_rollout,
    tick,
    tool_span,
)
from tether.adapters import build_transitions
from tether.store import SQLiteStore

P1 = [1, 10, 11, 12]
R1 = [20, 21, 2]
OBS = [198, 1, 30, 31, 2, 198, 1, 40]
R2 = [22, 23]


def test_one_transition_per_call_with_exact_ids(store: SQLiteStore) -> None:
    rollout = running_rollout(store, group_id="g1")
    first, second = call_span(rollout.id, P1, R1), call_span(rollout.id, [5, 6], R2, policy_version=4)
    store.add_spans([first, second, tool_span(rollout.id)])
    store.add_rewards([reward(rollout.id, 0.75)])

    report = build_transitions(store, [rollout])

    assert report.calls == 2 and report.merged == 0 and not report.skipped and not report.merge_breaks
    one, two = report.transitions
    assert (one.prompt_ids, one.response_ids, one.response_logprobs) == (P1, R1, logprobs_for(R1))
    assert one.loss_mask == [1, 1, 1] and one.span_ids == [first.span_id] and one.call_index == 0
    assert (one.rollout_id, one.task_id, one.group_id, one.mode) == (rollout.id, "task-1", "g1", "train")
    assert (one.attempt, one.agent, one.policy_version, one.reward) == (1, "policy", 1, 0.75)
    assert (two.prompt_ids, two.response_ids, two.call_index, two.policy_version) == ([5, 6], R2, 1, 4)
    assert two.reward == 0.75


def test_rollout_ids_are_accepted(store: SQLiteStore) -> None:
    rollout = running_rollout(store)
    store.add_spans([call_span(rollout.id, P1, R1)])
    assert len(build_transitions(store, [rollout.id]).transitions) == 1


def test_final_reward_is_the_last_recorded_primary_whatever_time_it_claims(store: SQLiteStore) -> None:
    rollout = running_rollout(store)
    store.add_spans([call_span(rollout.id, P1, R1)])
    late = tick() + 100
    store.add_rewards(
        [
            reward(rollout.id, 3.0, time=late),
            reward(rollout.id, 1.0),
            reward(rollout.id, 4.0, time=late),
            reward(rollout.id, 9.0, primary=False, time=late + 1),
            reward(rollout.id, 5.0, name="judge"),
            reward(rollout.id, 7.0, attempt=2, time=late + 2),
        ]
    )

    assert build_transitions(store, [rollout]).transitions[0].reward == 5.0
    assert build_transitions(store, [rollout], reward_name="reward").transitions[0].reward == 4.0
    assert build_transitions(store, [rollout], reward_name="judge").transitions[0].reward == 5.0
    report = build_transitions(store, [rollout], reward_name="missing")
    assert report.transitions[0].reward == 0.0 and report.rollouts_without_reward == 1


def test_rollout_without_reward_gets_zero_and_is_counted(store: SQLiteStore) -> None:
    rollout = running_rollout(store)
    store.add_spans([call_span(rollout.id, P1, R1)])
    store.add_rewards([reward(rollout.id, 1.0, primary=False)])
    report = build_transitions(store, [rollout])
    assert report.transitions[0].reward == 0.0 and report.transitions[0].step_reward == 0.0
    assert report.rollouts_without_reward == 1
    assert "1 rollouts had no final reward" in report.summary()


def test_step_rewards_linked_to_calls_and_to_tool_spans(store: SQLiteStore) -> None:
    rollout = running_rollout(store)
    first = call_span(rollout.id, P1, R1)
    tool = tool_span(rollout.id)
    second = call_span(rollout.id, [7], R2)
    failed = call_span(rollout.id, [8], None, failed=True)
    late_tool = tool_span(rollout.id)
    store.add_spans([first, tool, second, failed, late_tool])
    store.add_rewards(
        [
            reward(rollout.id, 0.5, span_id=first.span_id, primary=False),
            reward(rollout.id, 0.25, span_id=tool.span_id, primary=False),
            reward(rollout.id, 2.0, span_id=late_tool.span_id),
            reward(rollout.id, 10.0, primary=False),
            reward(rollout.id, 1.0),
            reward(rollout.id, 99.0, span_id="not-a-span", primary=False),
        ]
    )

    one, two = build_transitions(store, [rollout]).transitions
    assert one.step_reward == 0.75
    assert two.step_reward == 2.0
    assert one.reward == two.reward == 1.0


def test_step_rewards_of_merged_calls_are_summed(store: SQLiteStore) -> None:
    rollout = running_rollout(store)
    first, second = call_span(rollout.id, P1, R1), call_span(rollout.id, P1 + R1 + OBS, R2)
    store.add_spans([first, second])
    store.add_rewards([reward(rollout.id, 0.5, span_id=s.span_id, primary=False) for s in (first, second)])
    (merged,) = build_transitions(store, [rollout], merge=True).transitions
    assert merged.step_reward == 1.0


def test_agent_selection_trains_the_writer_and_skips_the_checker(store: SQLiteStore) -> None:
    rollout = running_rollout(store)
    writer = call_span(rollout.id, P1, R1, agent="writer")
    checker = call_span(rollout.id, [3, 4], [5], agent="checker")
    store.add_spans([writer, checker, call_span(rollout.id, P1 + R1 + OBS, R2, agent="writer")])
    store.add_rewards([reward(rollout.id, 1.0, span_id=checker.span_id, primary=False)])

    report = build_transitions(store, [rollout], agents=["writer"])
    assert [t.agent for t in report.transitions] == ["writer", "writer"]
    assert [t.call_index for t in report.transitions] == [0, 2]
    assert report.skipped == {"agent_not_selected": 1}
    assert all(t.step_reward == 0.0 for t in report.transitions)

    merged = build_transitions(store, [rollout], agents=["writer"], merge=True)
    assert len(merged.transitions) == 2 and merged.merged == 0
    assert merged.merge_breaks == {"agent_changed": 1}

    everyone = build_transitions(store, [rollout], merge=True)
    assert [t.agent for t in everyone.transitions] == ["writer", "checker", "writer"]
    assert everyone.merge_breaks == {"agent_changed": 2}


def test_earlier_attempts_are_skipped_unless_all_are_asked_for(store: SQLiteStore) -> None:
    rollout = retried_rollout(store)
    store.add_spans([call_span(rollout.id, P1, R1, attempt=1), call_span(rollout.id, P1, R2, attempt=2)])
    store.add_rewards([reward(rollout.id, 0.0, attempt=1), reward(rollout.id, 1.0, attempt=2)])

    report = build_transitions(store, [rollout])
    (only,) = report.transitions
    assert (only.attempt, only.response_ids, only.reward, only.call_index) == (2, R2, 1.0, 0)
    assert report.calls == 2 and report.skipped == {"earlier_attempt": 1}

    every = build_transitions(store, [rollout], attempts="all", merge=True)
    assert [(t.attempt, t.reward) for t in every.transitions] == [(1, 0.0), (2, 1.0)]
    assert every.merge_breaks == {"attempt_changed": 1}
    with pytest.raises(ValueError, match="attempts"):
        build_transitions(store, [rollout], attempts="first")  # type: ignore[arg-type]


def test_calls_without_token_ids_or_logprobs_are_skipped(store: SQLiteStore) -> None:
    rollout = running_rollout(store)
    store.add_spans(
        [
            call_span(rollout.id, None, None),
            call_span(rollout.id, P1, None),
            call_span(rollout.id, None, R1),
            call_span(rollout.id, P1, R1, logprobs=None),
            call_span(rollout.id, P1, R1, logprobs=[-1.0]),
            call_span(rollout.id, P1, None, failed=True),
            call_span(rollout.id, P1, R1),
        ]
    )
    report = build_transitions(store, [rollout])
    assert report.calls == 7 and len(report.transitions) == 1
    assert report.transitions[0].call_index == 6
    assert report.skipped == {
        "missing_token_ids": 3,
        "missing_logprobs": 1,
        "logprobs_length_mismatch": 1,
        "failed_call": 1,
    }


def test_choice_selects_one_of_n(store: SQLiteStore) -> None:
    rollout = running_rollout(store)
    other = {"index": 1, "text": "b", "finish_reason": "stop", "token_ids": [9, 9], "logprobs": [-0.1, -0.2]}
    store.add_spans([call_span(rollout.id, P1, R1, extra_choices=[other])])
    assert build_transitions(store, [rollout], choice=1).transitions[0].response_ids == [9, 9]
    report = build_transitions(store, [rollout], choice=2)
    assert report.skipped == {"no_choices": 1} and not report.transitions


def test_merge_with_exact_prefix_masks_the_observation(store: SQLiteStore) -> None:
    rollout = running_rollout(store)
    first = call_span(rollout.id, P1, R1, policy_version=3)
    second = call_span(rollout.id, P1 + R1 + OBS, R2, policy_version=2)
    third = call_span(rollout.id, P1 + R1 + OBS + R2, [50], policy_version=None)
    store.add_spans([first, second, third])

    report = build_transitions(store, [rollout], merge=True)
    (merged,) = report.transitions
    assert report.merged == 2 and not report.merge_breaks
    assert merged.prompt_ids == P1
    assert merged.response_ids == R1 + OBS + R2 + [50]
    assert merged.loss_mask == [1] * 3 + [0] * len(OBS) + [1, 1] + [1]
    assert merged.response_logprobs == logprobs_for(R1) + [0.0] * len(OBS) + logprobs_for(R2) + [-0.5]
    assert merged.span_ids == [first.span_id, second.span_id, third.span_id]
    assert merged.policy_version == 2 and merged.merged_calls == 3 and merged.trained_tokens == 6
    assert merged.response_versions == [3] * 3 + [None] * len(OBS) + [2, 2] + [None]
    assert "2 calls merged" in report.summary()


def test_merge_breaks_on_prefix_mismatch(store: SQLiteStore) -> None:
    rollout = running_rollout(store)
    retokenized = P1 + [20, 99] + OBS
    store.add_spans([call_span(rollout.id, P1, R1), call_span(rollout.id, retokenized, R2)])
    report = build_transitions(store, [rollout], merge=True)
    assert [t.prompt_ids for t in report.transitions] == [P1, retokenized]
    assert all(set(t.loss_mask) == {1} for t in report.transitions)
    assert report.merge_breaks == {"prefix_mismatch": 1} and report.merged == 0
    assert "merge chains broken: prefix_mismatch 1" in report.summary()


def test_merge_breaks_when_the_prompt_is_shorter_than_the_sequence(store: SQLiteStore) -> None:
    rollout = running_rollout(store)
    store.add_spans([call_span(rollout.id, P1, R1), call_span(rollout.id, P1 + R1[:1], R2)])
    assert build_transitions(store, [rollout], merge=True).merge_breaks == {"prefix_mismatch": 1}


def test_a_call_without_ids_breaks_the_chain_but_a_failed_call_does_not(store: SQLiteStore) -> None:
    rollout = running_rollout(store)
    store.add_spans(
        [
            call_span(rollout.id, P1, R1),
            call_span(rollout.id, P1 + R1 + OBS, None, failed=True),
            call_span(rollout.id, P1 + R1 + OBS, R2),
            call_span(rollout.id, None, None),
            call_span(rollout.id, P1 + R1 + OBS + R2 + [7], [8]),
        ]
    )
    report = build_transitions(store, [rollout], merge=True)
    assert [len(t.span_ids) for t in report.transitions] == [2, 1]
    assert report.merged == 1 and report.merge_breaks == {"missing_token_ids": 1}
    assert report.skipped == {"failed_call": 1, "missing_token_ids": 1}


def test_policy_version_of_merged_calls_is_the_minimum_known_one(store: SQLiteStore) -> None:
    rollout = running_rollout(store)
    store.add_spans(
        [
            call_span(rollout.id, P1, R1, policy_version=None),
            call_span(rollout.id, P1 + R1, R2, policy_version=5),
        ]
    )
    (merged,) = build_transitions(store, [rollout], merge=True).transitions
    assert merged.policy_version == 5 and merged.loss_mask == [1] * 5
    assert merged.response_versions == [None] * 3 + [5] * 2


def test_no_known_version_leaves_the_token_versions_empty(store: SQLiteStore) -> None:
    rollout = running_rollout(store)
    store.add_spans([call_span(rollout.id, P1, R1, policy_version=None)])
    (transition,) = build_transitions(store, [rollout]).transitions
    assert transition.policy_version is None and transition.response_versions == []


def test_summary_names_counts_and_reasons(store: SQLiteStore) -> None:
    rollout = running_rollout(store)
    store.add_spans([call_span(rollout.id, P1, R1), call_span(rollout.id, None, None)])
    store.add_rewards([reward(rollout.id, 1.0)])
    summary = build_transitions(store, [rollout]).summary()
    assert summary.startswith("1 transitions (3 trained tokens) from 2 LLM calls in 1 rollouts")
    assert "calls skipped: missing_token_ids 1" in summary


def test_an_aborted_stream_is_kept_in_the_store_but_not_trained_on(store: SQLiteStore) -> None:
    rollout = running_rollout(store)
    whole = call_span(rollout.id, P1, R1)
    partial = call_span(rollout.id, P1, R1[:1]).model_copy(update={"status": "aborted"})
    store.add_spans([partial, whole])
    store.add_rewards([reward(rollout.id, 1.0)])
    report = build_transitions(store, [rollout])
    assert [t.response_ids for t in report.transitions] == [R1]
    assert report.skipped["aborted_call"] == 1
