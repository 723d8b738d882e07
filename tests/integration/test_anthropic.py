"""The official anthropic SDK against the gateway's Messages API: tool use, plain and streaming.

The SDK adds `/v1/messages` to its base URL itself, so an agent is given the rollout URL without `/v1`
(ANTHROPIC_BASE_URL=.../rollouts/{id}); the rollout token goes in its `x-api-key` header.
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from anthropic.types import Message, ToolUseBlock

from tests.integration.support import MODEL, Scripted, Session, assert_engine_span, assert_weather_round_trip
from tests.integration.tools import CITY, FINAL_ANSWER, QUESTION, WEATHER_TOOL_SCRIPT, get_weather

pytestmark = pytest.mark.integration

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def client(session: Session) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=session.root_url, api_key=session.api_key, max_retries=0)


def ask(sdk: anthropic.Anthropic, messages: list[dict[str, Any]], stream: bool) -> Message:
    request: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 256,
        "messages": messages,
        "tools": [WEATHER_TOOL],
    }
    if not stream:
        return sdk.messages.create(**request)
    with sdk.messages.stream(**request) as events:
        return events.get_final_message()


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streaming"])
def test_tool_use_round_trip(scripted: Scripted, stream: bool) -> None:
    scripted.script.turns.extend(WEATHER_TOOL_SCRIPT)
    sdk = client(scripted.session)
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    first = ask(sdk, messages, stream)
    assert first.stop_reason == "tool_use"
    [tool_use] = [block for block in first.content if isinstance(block, ToolUseBlock)]
    assert tool_use.name == "get_weather" and tool_use.input == {"city": CITY}
    result = get_weather(**tool_use.input)  # type: ignore[arg-type]
    messages += [
        {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": result}]},
    ]
    second = ask(sdk, messages, stream)
    assert second.stop_reason == "end_turn"
    assert "".join(block.text for block in second.content if block.type == "text") == FINAL_ANSWER

    tool_span, answer_span = assert_weather_round_trip(scripted)
    assert [span.attributes.get("api") for span in (tool_span, answer_span)] == ["messages", "messages"]
    assert all(span.attributes["stream"] is stream for span in (tool_span, answer_span))
    # The span keeps the request as the agent sent it, in the Messages shape.
    assert answer_span.attributes["request"]["messages"][-1]["content"][0]["tool_use_id"] == tool_use.id


def test_engine_answers_plain_message(engine_session: Session) -> None:
    message = client(engine_session).messages.create(
        model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "Hi"}]
    )
    assert message.stop_reason == "max_tokens"  # the tiny random model never stops before the limit
    answer = "".join(block.text for block in message.content if block.type == "text")
    span = assert_engine_span(engine_session, answer)
    assert span.attributes["api"] == "messages"
