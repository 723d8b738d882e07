"""Anthropic's Messages API on the gateway, with the real anthropic SDK: translated to chat, recorded as
one chat-like span with token ids, answered (and streamed) as Messages objects and events."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from tests.gateway.dialect_helpers import PIXEL, call_through_pause, only_span
from tests.gateway.scripted_upstream import FIRST_TOKEN_ID, PROMPT_IDS, Script, ScriptedCall, scripted_rig
from tests.rigs import GatewayRig
from tether.adapters.build import build_transitions
from tether.contracts import REFUSED_CALL_SPAN

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
WEATHER_CALL = ScriptedCall("call_w1", "get_weather", ['{"city":', ' "Paris"}'])
HELLO = [{"role": "user", "content": "Say hello."}]


@pytest.fixture
def script() -> Script:
    return Script()


@pytest.fixture
def srig(tmp_path: Path, script: Script) -> Iterator[GatewayRig]:
    yield from scripted_rig(tmp_path, script)


def client(rig: GatewayRig, rollout_id: str, key: str) -> anthropic.Anthropic:
    # Anthropic clients append /v1/messages to their base URL.
    return anthropic.Anthropic(base_url=f"{rig.url}/rollouts/{rollout_id}", api_key=key, max_retries=0)


def session(rig: GatewayRig) -> tuple[str, anthropic.Anthropic]:
    rollout_id, _, key = rig.session()
    return rollout_id, client(rig, rollout_id, key)


def test_text_message_is_translated_and_recorded(srig: GatewayRig, script: Script) -> None:
    rollout_id, llm = session(srig)
    reply = llm.messages.create(
        model="policy",
        system=[{"type": "text", "text": "Be brief."}],
        messages=HELLO,
        max_tokens=40,
        stop_sequences=["\n\n"],
        extra_body={"temperature": 0.5},  # older clients send it; this SDK has no argument for it
    )
    assert [block.type for block in reply.content] == ["text"]
    assert reply.content[0].text == script.text  # type: ignore[union-attr]
    assert reply.stop_reason == "end_turn" and reply.role == "assistant"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (len(PROMPT_IDS), len(script.pieces()))

    sent = script.requests[-1]
    assert sent["messages"] == [{"role": "system", "content": "Be brief."}, *HELLO]
    assert (sent["max_tokens"], sent["temperature"], sent["stop"]) == (40, 0.5, ["\n\n"])

    span = only_span(srig, rollout_id)
    attrs = span.attributes
    assert span.name == "llm.chat" and attrs["call"] == "chat" and attrs["api"] == "messages"
    assert attrs["request"]["system"] == [{"type": "text", "text": "Be brief."}]
    assert attrs["chat_request"]["stop"] == ["\n\n"]
    assert attrs["prompt_token_ids"] == PROMPT_IDS
    assert attrs["choices"][0]["token_ids"] == script.token_ids()
    assert attrs["choices"][0]["logprobs"] == script.logprobs()


def test_streamed_message_parses_in_the_sdk(srig: GatewayRig, script: Script) -> None:
    rollout_id, llm = session(srig)
    with llm.messages.stream(model="policy", messages=HELLO, max_tokens=40) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == script.text == final.content[0].text  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (len(PROMPT_IDS), len(script.pieces()))
    attrs = only_span(srig, rollout_id).attributes
    assert attrs["api"] == "messages" and attrs["stream"] is True
    assert attrs["choices"][0]["token_ids"] == script.token_ids()


def test_raw_stream_event_sequence(srig: GatewayRig, script: Script) -> None:
    _, llm = session(srig)
    events = list(llm.messages.create(model="policy", messages=HELLO, max_tokens=40, stream=True))
    assert [event.type for event in events] == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * len(script.text_pieces),
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_tool_use_round_trip(srig: GatewayRig, script: Script, stream: bool) -> None:
    script.text_pieces, script.calls = ["Let me check."], [WEATHER_CALL]
    rollout_id, llm = session(srig)
    question = [{"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]}]
    options: dict[str, Any] = {"model": "policy", "max_tokens": 64, "tools": [WEATHER_TOOL]}
    if stream:
        with llm.messages.stream(messages=question, tool_choice={"type": "auto"}, **options) as events:
            reply = events.get_final_message()
    else:
        reply = llm.messages.create(messages=question, tool_choice={"type": "auto"}, **options)
    assert [block.type for block in reply.content] == ["text", "tool_use"]
    tool_use = reply.content[1]
    assert (tool_use.id, tool_use.name, tool_use.input) == ("call_w1", "get_weather", {"city": "Paris"})  # type: ignore[union-attr]
    assert reply.stop_reason == "tool_use"
    assert script.requests[-1]["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": WEATHER_TOOL["input_schema"],
                "description": WEATHER_TOOL["description"],
            },
        }
    ]
    assert script.requests[-1]["tool_choice"] == "auto"

    script.calls, script.text_pieces = [], ["Sunny", "."]
    followup = [
        *question,
        {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in reply.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "call_w1", "content": "22C, sunny"}],
        },
    ]
    answer = llm.messages.create(messages=followup, **options)
    assert answer.content[0].text == "Sunny."  # type: ignore[union-attr]
    assert script.requests[-1]["messages"] == [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [
                {
                    "id": "call_w1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_w1", "content": "22C, sunny"},
    ]
    first, second = srig.store.query_spans(rollout_id=rollout_id)
    assert first.attributes["choices"][0]["token_ids"] == [FIRST_TOKEN_ID + i for i in range(3)]
    assert second.attributes["request"]["messages"][-1]["content"][0]["type"] == "tool_result"


def test_arguments_that_are_not_json_reach_the_agent(srig: GatewayRig, script: Script) -> None:
    script.text_pieces, script.calls = [], [ScriptedCall("call_x", "get_weather", ["{city: Paris"])]
    _, llm = session(srig)
    for stream in (False, True):
        if stream:
            with llm.messages.stream(model="policy", messages=HELLO, max_tokens=9, tools=[WEATHER_TOOL]) as s:
                reply = s.get_final_message()
        else:
            reply = llm.messages.create(model="policy", messages=HELLO, max_tokens=9, tools=[WEATHER_TOOL])
        assert reply.content[0].input == {"_unparsed_arguments": "{city: Paris"}  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("finish", "stop_reason", "expected"),
    [("length", None, ("max_tokens", None)), ("stop", "END", ("stop_sequence", "END"))],
)
@pytest.mark.parametrize("stream", [False, True])
def test_stop_reasons(
    srig: GatewayRig, script: Script, finish: str, stop_reason: str | None, expected: tuple, stream: bool
) -> None:
    script.finish_reason, script.stop_reason = finish, stop_reason
    _, llm = session(srig)
    options: dict[str, Any] = {
        "model": "policy",
        "messages": HELLO,
        "max_tokens": 3,
        "stop_sequences": ["END"],
    }
    if stream:
        with llm.messages.stream(**options) as s:
            reply = s.get_final_message()
    else:
        reply = llm.messages.create(**options)
    assert (reply.stop_reason, reply.stop_sequence) == expected


def test_tool_choice_any_and_named(srig: GatewayRig, script: Script) -> None:
    _, llm = session(srig)
    options: dict[str, Any] = {"model": "policy", "messages": HELLO, "max_tokens": 8, "tools": [WEATHER_TOOL]}
    llm.messages.create(tool_choice={"type": "any", "disable_parallel_tool_use": True}, **options)
    assert script.requests[-1]["tool_choice"] == "required"
    assert script.requests[-1]["parallel_tool_calls"] is False
    llm.messages.create(tool_choice={"type": "tool", "name": "get_weather"}, **options)
    assert script.requests[-1]["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"max_tokens": None}, "max_tokens"),
        ({"top_k": 5}, "top_k"),
        ({"thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
        ({"thinking": {"type": "always"}}, "thinking.type"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
        (
            {"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
            "messages[0].content[0].type",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file"}}]}]},
            "messages[0].content[0].source.type",
        ),
        ({"tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
    ],
)
def test_unsupported_or_bad_fields_give_anthropic_400(
    srig: GatewayRig, script: Script, extra: dict[str, Any], param: str
) -> None:
    rollout_id, llm = session(srig)
    body = {"messages": HELLO, "max_tokens": 8, **extra}
    with pytest.raises(anthropic.BadRequestError) as raised:
        llm.messages.create(model="policy", messages=HELLO, max_tokens=8, extra_body=body)
    error = raised.value.body
    assert isinstance(error, dict) and error["type"] == "error"
    assert error["error"]["type"] == "invalid_request_error"
    assert param in error["error"]["message"]
    assert script.requests == []  # no model call; the refusal kept, with its error
    assert [s.name for s in srig.store.query_spans(rollout_id=rollout_id)] == [REFUSED_CALL_SPAN]


def test_errors_have_anthropic_shape(srig: GatewayRig) -> None:
    rollout_id, _, key = srig.session()
    with pytest.raises(anthropic.AuthenticationError) as raised:
        client(srig, rollout_id, "sk-wrong").messages.create(model="policy", messages=HELLO, max_tokens=8)
    assert raised.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json"}
    response = httpx.post(f"{srig.url}/rollouts/{rollout_id}/v1/messages", content=b"{oops", headers=headers)
    assert response.status_code == 400
    assert response.json()["type"] == "error" and "not valid JSON" in response.json()["error"]["message"]


def test_upstream_failure_is_an_anthropic_api_error(tmp_path: Path) -> None:
    from tests.gateway.fake_upstream import Behaviour, create_fake_upstream
    from tests.helpers import serve_app
    from tests.rigs import make_rig

    behaviour = Behaviour(fail_next=100)
    with serve_app(create_fake_upstream(behaviour)) as url:
        for rig in make_rig(tmp_path, url + "/v1", behaviour):
            rollout_id, llm = session(rig)
            with pytest.raises(anthropic.APIStatusError) as raised:
                llm.messages.create(model="policy", messages=HELLO, max_tokens=8)
            assert raised.value.status_code == 502
            assert raised.value.body["error"]["type"] == "api_error"  # type: ignore[index]
            assert only_span(rig, rollout_id).status == "error"


def test_paused_gateway_holds_messages_calls(srig: GatewayRig, script: Script) -> None:
    rollout_id, llm = session(srig)
    results = call_through_pause(
        srig, script, lambda: llm.messages.create(model="policy", messages=HELLO, max_tokens=8)
    )
    assert results and results[0].content[0].text == script.text
    assert len(srig.store.query_spans(rollout_id=rollout_id)) == 1


@pytest.mark.parametrize("stream", [False, True])
def test_messages_calls_become_transitions(srig: GatewayRig, script: Script, stream: bool) -> None:
    rollout_id, llm = session(srig)
    if stream:
        with llm.messages.stream(model="policy", messages=HELLO, max_tokens=8) as s:
            s.until_done()
    else:
        llm.messages.create(model="policy", messages=HELLO, max_tokens=8)
    [transition] = build_transitions(srig.store, [rollout_id]).transitions
    assert transition.prompt_ids == PROMPT_IDS
    assert transition.response_ids == script.token_ids()
    assert transition.response_logprobs == script.logprobs()


@pytest.mark.parametrize("stream", [False, True])
def test_engine_upstream_records_exact_ids(engine_rig: GatewayRig, tiny_engine: Any, stream: bool) -> None:
    rollout_id, llm = session(engine_rig)
    options: dict[str, Any] = {"model": "policy", "system": "Count.", "messages": HELLO, "max_tokens": 6}
    if stream:
        with llm.messages.stream(**options) as s:
            reply = s.get_final_message()
    else:
        reply = llm.messages.create(**options)
    text = reply.content[0].text  # type: ignore[union-attr]
    span = only_span(engine_rig, rollout_id)
    choice = span.attributes["choices"][0]
    messages = [{"role": "system", "content": "Count."}, *HELLO]
    assert span.attributes["prompt_token_ids"] == tiny_engine.chat_prompt_ids(messages)
    assert choice["text"] == text and 0 < len(choice["token_ids"]) <= 6
    assert reply.usage.output_tokens == len(choice["token_ids"])
    [transition] = build_transitions(engine_rig.store, [rollout_id]).transitions
    assert transition.response_ids == choice["token_ids"]


IMAGE_TURN = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in these?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
        ],
    }
]


def test_images_reach_the_upstream_as_chat_image_parts_and_are_recorded(
    srig: GatewayRig, script: Script
) -> None:
    rollout_id, llm = session(srig)
    reply = llm.messages.create(model="policy", messages=IMAGE_TURN, max_tokens=8)  # type: ignore[arg-type]
    assert reply.content[0].text == script.text  # type: ignore[union-attr]
    assert script.requests[-1]["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in these?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
            ],
        }
    ]
    attrs = only_span(srig, rollout_id).attributes
    assert attrs["request"]["messages"] == IMAGE_TURN
    assert attrs["prompt_token_ids"] == PROMPT_IDS  # the upstream's, as for text
    assert attrs["choices"][0]["token_ids"] == script.token_ids()
    # Its prompt ids stand for pixels a text learner never sees: kept, not trained on, counted.
    report = build_transitions(srig.store, [rollout_id])
    assert report.transitions == [] and report.skipped == {"non_text_input": 1}


def test_the_built_in_engine_refuses_an_image_naming_why(engine_rig: GatewayRig) -> None:
    _, llm = session(engine_rig)
    with pytest.raises(anthropic.BadRequestError) as raised:
        llm.messages.create(model="policy", messages=IMAGE_TURN, max_tokens=8)  # type: ignore[arg-type]
    assert "reads text only" in raised.value.body["error"]["message"]  # type: ignore[index]
