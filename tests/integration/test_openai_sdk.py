"""The official openai SDK against the gateway: plain, streaming and tool-calling chat completions."""

from __future__ import annotations

import json

import openai
import pytest

from tests.integration.scripted_upstream import say
from tests.integration.support import (
    MODEL,
    Scripted,
    Session,
    assert_engine_span,
    assert_recorded,
    assert_weather_round_trip,
    recorded_tool_calls,
)
from tests.integration.tools import CITY, FINAL_ANSWER, QUESTION, WEATHER_TOOL_SCRIPT, get_weather

pytestmark = pytest.mark.integration

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def client(session: Session) -> openai.OpenAI:
    return openai.OpenAI(base_url=session.base_url, api_key=session.api_key, max_retries=0)


def test_plain_chat(scripted: Scripted) -> None:
    scripted.script.turns.append(say("Hello from the script."))
    reply = client(scripted.session).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}]
    )
    assert reply.choices[0].message.content == "Hello from the script."
    [span] = assert_recorded(scripted.session, scripted.script)
    assert span.attributes["request"]["messages"] == [{"role": "user", "content": "Hi"}]


def test_streaming_chat(scripted: Scripted) -> None:
    scripted.script.turns.append(say("Streamed word by word."))
    stream = client(scripted.session).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "Streamed word by word."
    [span] = assert_recorded(scripted.session, scripted.script)
    assert span.attributes["stream"] is True
    assert span.attributes["choices"][0]["text"] == text


def test_tool_call_round_trip(scripted: Scripted) -> None:
    scripted.script.turns.extend(WEATHER_TOOL_SCRIPT)
    sdk = client(scripted.session)
    messages: list[dict] = [{"role": "user", "content": QUESTION}]
    first = sdk.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER_TOOL])
    [call] = first.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather"
    result = get_weather(**json.loads(call.function.arguments))
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": result},
    ]
    second = sdk.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER_TOOL])
    assert second.choices[0].message.content == FINAL_ANSWER

    _, answer_span = assert_weather_round_trip(scripted)
    sent_back = scripted.script.requests[1]["messages"][-1]
    assert sent_back == {"role": "tool", "tool_call_id": call.id, "content": result}
    assert answer_span.attributes["request"]["messages"][-1] == sent_back


def test_streaming_tool_call(scripted: Scripted) -> None:
    scripted.script.turns.append(WEATHER_TOOL_SCRIPT[0])
    stream = client(scripted.session).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": QUESTION}], tools=[WEATHER_TOOL], stream=True
    )
    arguments, finish = "", None
    for chunk in stream:
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                arguments += delta.function.arguments or ""
            finish = choice.finish_reason or finish
    assert json.loads(arguments) == {"city": CITY} and finish == "tool_calls"
    [span] = assert_recorded(scripted.session, scripted.script)
    assert span.attributes["stream"] is True
    assert recorded_tool_calls(span) == [("get_weather", {"city": CITY})]


@pytest.mark.parametrize("stream", [False, True])
def test_engine_answers_plain_chat(engine_session: Session, stream: bool) -> None:
    sdk = client(engine_session)
    request = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}
    if stream:
        chunks = sdk.chat.completions.create(**request, stream=True)
        answer = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    else:
        answer = sdk.chat.completions.create(**request).choices[0].message.content or ""
    assert_engine_span(engine_session, answer)


def test_engine_answers_plain_responses_request(engine_session: Session) -> None:
    response = client(engine_session).responses.create(model=MODEL, input="Hi", max_output_tokens=8)
    assert response.status == "incomplete"  # the tiny random model never stops before the limit
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    span = assert_engine_span(engine_session, response.output_text)
    assert span.attributes["api"] == "responses"
    assert len(span.attributes["choices"][0]["token_ids"]) == 8
