"""Which agent a call belongs to: the header, an enclosing OpenTelemetry agent span, or the model alias."""

from __future__ import annotations

from tests.adapters.calls import call_span, reward, running_rollout, tick
from tether.adapters import build_transitions
from tether.store import SQLiteStore
from tether.store.records import Span


def agent_span(rollout_id: str, name: str, key: str = "gen_ai.agent.name") -> Span:
    start = tick()
    return Span(
        rollout_id=rollout_id,
        attempt=1,
        name=f"agent {name}",
        start_time=start,
        end_time=start + 5,
        attributes={key: name},
    )


def test_fixed_agents_are_excluded_and_every_agent_is_counted(store: SQLiteStore) -> None:
    rollout = running_rollout(store)
    store.add_spans(
        [
            call_span(rollout.id, [1, 2], [3], agent="writer"),
            call_span(rollout.id, [1, 4], [5], agent="checker"),
            call_span(rollout.id, [1, 6], [7], agent="rewriter"),
        ]
    )
    store.add_rewards([reward(rollout.id, 1.0)])
    report = build_transitions(store, [rollout], exclude_agents=["checker"])
    assert [t.agent for t in report.transitions] == ["writer", "rewriter"]
    assert report.skipped == {"agent_not_selected": 1}
    assert report.calls_by_agent == {"writer": 1, "checker": 1, "rewriter": 1}
    both = build_transitions(store, [rollout], agents=["writer", "checker"], exclude_agents=["checker"])
    assert [t.agent for t in both.transitions] == ["writer"]


def test_an_enclosing_otel_agent_span_names_the_call(store: SQLiteStore) -> None:
    rollout = running_rollout(store)
    outer = agent_span(rollout.id, "planner")
    inner = Span(  # a span between the agent span and the call, with no agent name of its own
        rollout_id=rollout.id,
        attempt=1,
        name="step",
        parent_id=outer.span_id,
        start_time=tick(),
        end_time=tick(),
    )
    traced = call_span(rollout.id, [1, 2], [3], agent="policy")
    traced.parent_id = inner.span_id
    untraced = call_span(rollout.id, [1, 4], [5], agent="policy")
    declared = call_span(rollout.id, [1, 6], [7], agent="critic")
    declared.parent_id = inner.span_id
    declared.attributes["agent_source"] = "header"
    store.add_spans([outer, inner, traced, untraced, declared])
    store.add_rewards([reward(rollout.id, 1.0)])

    report = build_transitions(store, [rollout])
    assert [t.agent for t in report.transitions] == ["planner", "policy", "critic"]
    only_planner = build_transitions(store, [rollout], agents=["planner"])
    assert len(only_planner.transitions) == 1 and only_planner.transitions[0].response_ids == [3]


def test_a_parent_outside_the_rollout_leaves_the_alias(store: SQLiteStore) -> None:
    rollout = running_rollout(store)
    orphan = call_span(rollout.id, [1, 2], [3], agent="writer")
    orphan.parent_id = "0123456789abcdef"
    store.add_spans([orphan])
    store.add_rewards([reward(rollout.id, 0.5)])
    assert [t.agent for t in build_transitions(store, [rollout]).transitions] == ["writer"]
