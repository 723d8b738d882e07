"""Automatic step rewards (AIR) read only the model calls the gateway recorded: a truncated call the
agent reports itself is no evidence either way."""

from __future__ import annotations

from tether.contracts import Origin
from tether.runner.rewards import AIRRules, air_rewards
from tether.store.records import Span


def truncated_call(origin: str) -> Span:
    choices = [{"text": "the answer is", "finish_reason": "length"}]
    return Span(
        rollout_id="ro-1",
        attempt=1,
        name="llm.chat",
        start_time=0.0,
        attributes={"choices": choices},
        origin=origin,
    )


def test_only_a_truncated_call_the_gateway_recorded_is_rewarded() -> None:
    spans = [truncated_call(Origin.GATEWAY), truncated_call(Origin.AGENT)]
    rewards = air_rewards(spans, AIRRules(truncated=-0.5), "ro-1", 1)
    assert [(r.name, r.value, r.span_id) for r in rewards] == [("air:truncated", -0.5, spans[0].span_id)]
