"""OpenAI's Responses API on the gateway, with the real openai SDK: translated to chat, recorded as one
chat-like span with token ids, answered (and streamed) as Responses objects and events."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.gateway.dialect_helpers import PIXEL, call_through_pause, only_span, wait_for_spans
from tests.gateway.scripted_upstream import FIRST_TOKEN_ID, PROMPT_IDS, Script, ScriptedCall, scripted_rig
from tests.rigs import GatewayRig
from tether.adapters.build import build_transitions
from tether.contracts import REFUSED_CALL_SPAN, CallAttr

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
WEATHER_CALL = ScriptedCall("call_w1", "get_weather", ['{"city":', ' "Paris"}'])


@pytest.fixture
def script() -> Script:
    return Script()


@pytest.fixture
def srig(tmp_path: Path, script: Script) -> Iterator[GatewayRig]:
    yield from scripted_rig(tmp_path, script)


def client(base_url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)


def test_text_response_is_translated_and_recorded(srig: GatewayRig, script: Script) -> None:
    rollout_id, base_url, key = srig.session()
    reply = client(base_url, key).responses.create(
        model="policy", instructions="Be brief.", input="Say hello.", max_output_tokens=40, temperature=0.5
    )
    assert reply.output_text == script.text
    assert reply.id.startswith("resp_") and reply.status == "completed"
    assert reply.output[0].type == "message" and reply.output[0].content[0].type == "output_text"
    assert reply.usage is not None
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (len(PROMPT_IDS), len(script.pieces()))

    sent = script.requests[-1]
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Say hello."},
    ]
    assert sent["max_tokens"] == 40 and sent["temperature"] == 0.5

    span = only_span(srig, rollout_id)
    attrs = span.attributes
    assert span.name == "llm.chat" and attrs["call"] == "chat" and attrs["api"] == "responses"
    assert attrs["request"]["input"] == "Say hello." and attrs["chat_request"]["max_tokens"] == 40
    assert attrs["prompt_token_ids"] == PROMPT_IDS
    assert attrs["choices"][0]["token_ids"] == script.token_ids()
    assert attrs["choices"][0]["logprobs"] == script.logprobs()


def test_streamed_response_events_parse_in_the_sdk(srig: GatewayRig, script: Script) -> None:
    rollout_id, base_url, key = srig.session()
    events = list(client(base_url, key).responses.create(model="policy", input="Say hello.", stream=True))
    kinds = [event.type for event in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * len(script.text_pieces),
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert deltas == script.text
    final = events[-1].response
    assert final.output_text == script.text and final.usage.output_tokens == len(script.pieces())

    attrs = only_span(srig, rollout_id).attributes
    assert attrs["api"] == "responses" and attrs["stream"] is True
    assert attrs["choices"][0]["token_ids"] == script.token_ids()
    assert attrs["choices"][0]["logprobs"] == script.logprobs()


def test_sse_lines_name_each_event(srig: GatewayRig) -> None:
    _, base_url, key = srig.session()
    body = {"model": "policy", "input": "hi", "stream": True}
    with httpx.stream(
        "POST", f"{base_url}/responses", json=body, headers={"Authorization": f"Bearer {key}"}
    ) as r:
        text = "".join(r.iter_text())
    blocks = [block for block in text.split("\n\n") if block]
    assert all(block.startswith("event: response.") for block in blocks)
    assert blocks[-1].startswith("event: response.completed\ndata: ")


def test_stream_helper_gives_the_final_response(srig: GatewayRig, script: Script) -> None:
    _, base_url, key = srig.session()
    with client(base_url, key).responses.stream(model="policy", input="Say hello.") as stream:
        text = "".join(event.delta for event in stream if event.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert text == final.output_text == script.text


@pytest.mark.parametrize("stream", [False, True])
def test_tool_call_round_trip(srig: GatewayRig, script: Script, stream: bool) -> None:
    script.text_pieces, script.calls = [], [WEATHER_CALL]
    rollout_id, base_url, key = srig.session()
    llm = client(base_url, key)
    question = [{"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]}]
    if stream:
        with llm.responses.stream(model="policy", input=question, tools=[WEATHER_TOOL]) as events:
            argument_deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
            reply = events.get_final_response()
        assert "".join(argument_deltas) == WEATHER_CALL.arguments
    else:
        reply = llm.responses.create(model="policy", input=question, tools=[WEATHER_TOOL], tool_choice="auto")
    [call] = reply.output
    assert call.type == "function_call"
    assert (call.call_id, call.name, call.arguments) == ("call_w1", "get_weather", WEATHER_CALL.arguments)
    assert script.requests[-1]["tools"] == [
        {
            "type": "function",
            "function": {k: WEATHER_TOOL[k] for k in ("name", "description", "parameters")},
        }
    ]

    script.calls, script.text_pieces = [], ["Sunny", "."]
    followup = [*question, call.model_dump(exclude_none=True)]
    followup.append({"type": "function_call_output", "call_id": call.call_id, "output": "22C, sunny"})
    answer = llm.responses.create(model="policy", input=followup, tools=[WEATHER_TOOL])
    assert answer.output_text == "Sunny."
    assert script.requests[-1]["messages"] == [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_w1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": WEATHER_CALL.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_w1", "content": "22C, sunny"},
    ]
    first, second = srig.store.query_spans(rollout_id=rollout_id)
    assert first.attributes["choices"][0]["token_ids"] == [FIRST_TOKEN_ID, FIRST_TOKEN_ID + 1]
    assert first.attributes["choices"][0]["finish_reason"] == "tool_calls"
    assert second.attributes["request"]["input"][-1]["type"] == "function_call_output"


def test_text_and_several_tool_calls_stream_as_separate_items(srig: GatewayRig, script: Script) -> None:
    second = ScriptedCall("call_w2", "get_weather", ['{"city": "Oslo"}'])
    script.text_pieces, script.calls = ["Checking", "."], [WEATHER_CALL, second]
    _, base_url, key = srig.session()
    with client(base_url, key).responses.stream(model="policy", input="Weather?", tools=[WEATHER_TOOL]) as s:
        events = list(s)
        reply = s.get_final_response()
    assert [item.type for item in reply.output] == ["message", "function_call", "function_call"]
    assert reply.output_text == "Checking."
    assert [item.call_id for item in reply.output[1:]] == ["call_w1", "call_w2"]
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert [e.arguments for e in done] == [WEATHER_CALL.arguments, second.arguments]


def test_truncated_answer_is_incomplete(srig: GatewayRig, script: Script) -> None:
    script.finish_reason = "length"
    _, base_url, key = srig.session()
    reply = client(base_url, key).responses.create(model="policy", input="hi", max_output_tokens=3)
    assert reply.status == "incomplete"
    assert reply.incomplete_details is not None and reply.incomplete_details.reason == "max_output_tokens"


def test_json_schema_format_becomes_response_format(srig: GatewayRig, script: Script) -> None:
    _, base_url, key = srig.session()
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    text = {"format": {"type": "json_schema", "name": "number", "schema": schema, "strict": True}}
    client(base_url, key).responses.create(model="policy", input="hi", text=text)  # type: ignore[arg-type]
    assert script.requests[-1]["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "number", "schema": schema, "strict": True},
    }


def test_verbosity_is_accepted_as_the_agents_sdk_sends_it(srig: GatewayRig, script: Script) -> None:
    """The Agents SDK's default model sends `text.verbosity`: accepted, recorded in the request, and the
    policy answers as it was trained to (no chat field is made of it)."""
    rollout_id, base_url, key = srig.session()
    text = {"format": {"type": "text"}, "verbosity": "low"}
    reply = client(base_url, key).responses.create(model="policy", input="hi", text=text)  # type: ignore[arg-type]
    assert reply.status == "completed" and "verbosity" not in script.requests[-1]
    assert only_span(srig, rollout_id).attributes[CallAttr.REQUEST]["text"] == text


def test_attempt_scoped_base_url(srig: GatewayRig) -> None:
    rollout_id, _, key = srig.session()
    url = f"{srig.url}/rollouts/{rollout_id}/attempts/1/v1"
    assert client(url, key).responses.create(model="policy", input="hi").status == "completed"
    assert only_span(srig, rollout_id).attempt == 1


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"previous_response_id": "resp_123"}, "previous_response_id"),
        ({"store": True}, "store"),
        ({"background": True}, "background"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"tools": [{"type": "file_search", "vector_store_ids": ["vs"]}]}, "tools[0].type"),
        (
            {"input": [{"type": "reasoning", "summary": [{"type": "summary_text"}]}]},
            "input[0].summary[0].text",
        ),
        ({"reasoning": {"effort": "enormous"}}, "reasoning.effort"),
        ({"text": {"verbosity": "verbose"}}, "text.verbosity"),
        ({"text": {"tone": "dry"}}, "text.tone"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "input[0].content[0].type",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
            "input[0].content[0].image_url",
        ),
        (
            {"input": [{"role": "assistant", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0].type",
        ),
        ({"include": ["message.output_text.logprobs"]}, "include[0]"),
        ({"seed": 3}, "seed"),
        ({"input": None}, "input"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"tool_choice": {"type": "web_search"}}, "tool_choice"),
    ],
)
def test_unsupported_or_bad_fields_give_400_naming_them(
    srig: GatewayRig, script: Script, extra: dict[str, Any], param: str
) -> None:
    rollout_id, base_url, key = srig.session()
    with pytest.raises(openai.BadRequestError) as raised:
        client(base_url, key).responses.create(model="policy", extra_body={"input": "hi", **extra})
    error = raised.value.body
    assert isinstance(error, dict) and error["param"] == param
    assert param.split("[")[0].split(".")[0] in error["message"]
    assert script.requests == []  # no model call; the refusal kept, with its error
    assert [s.name for s in srig.store.query_spans(rollout_id=rollout_id)] == [REFUSED_CALL_SPAN]


def test_store_false_is_accepted(srig: GatewayRig) -> None:
    _, base_url, key = srig.session()
    assert client(base_url, key).responses.create(model="policy", input="hi", store=False).store is False


def test_malformed_body_gives_400(srig: GatewayRig) -> None:
    _, base_url, key = srig.session()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    response = httpx.post(f"{base_url}/responses", content=b"{nope", headers=headers)
    assert response.status_code == 400 and "not valid JSON" in response.json()["error"]["message"]


def test_wrong_key_is_refused(srig: GatewayRig, script: Script) -> None:
    _, base_url, key = srig.session()
    with pytest.raises(openai.AuthenticationError):
        client(base_url, "sk-wrong").responses.create(model="policy", input="hi")
    assert script.requests == []


def test_paused_gateway_holds_responses_calls(srig: GatewayRig, script: Script) -> None:
    rollout_id, base_url, key = srig.session()
    llm = client(base_url, key)
    results = call_through_pause(srig, script, lambda: llm.responses.create(model="policy", input="hi"))
    assert [reply.output_text for reply in results] == [script.text]
    assert len(srig.store.query_spans(rollout_id=rollout_id)) == 1


@pytest.mark.parametrize("path", ["responses", "messages"])
def test_client_leaving_a_stream_early_frees_its_admission_slot(
    srig: GatewayRig, script: Script, path: str
) -> None:
    script.text_pieces, script.pause_s = ["tick"] * 50, 0.05
    rollout_id, base_url, key = srig.session()
    body = {"model": "policy", "input": "hi", "stream": True}
    if path == "messages":
        body = {
            "model": "policy",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 60,
            "stream": True,
        }
    admin = {"Authorization": f"Bearer {srig.auth.admin_token}"}
    with httpx.stream(
        "POST", f"{base_url}/{path}", json=body, headers={"Authorization": f"Bearer {key}"}
    ) as r:
        chunks = r.iter_raw()  # kept: a dropped iterator would close the response at once
        assert next(chunks).startswith(b"event: ")
        assert httpx.get(f"{srig.url}/admin/status", headers=admin).json()["in_flight"] == 1
    for _ in range(2000):
        if httpx.get(f"{srig.url}/admin/status", headers=admin).json()["in_flight"] == 0:
            break
    else:
        raise AssertionError("the abandoned stream still holds its admission slot")
    # Recorded as far as it got, marked aborted: it never finished, so it was never answered.
    [span] = wait_for_spans(srig, rollout_id, 1)
    assert span.status == "aborted" and "tick" in span.attributes["choices"][0]["text"]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_calls_become_transitions(srig: GatewayRig, script: Script, stream: bool) -> None:
    rollout_id, base_url, key = srig.session()
    result = client(base_url, key).responses.create(model="policy", input="hi", stream=stream)
    if stream:
        list(result)  # type: ignore[arg-type]
    report = build_transitions(srig.store, [rollout_id])
    [transition] = report.transitions
    assert transition.prompt_ids == PROMPT_IDS
    assert transition.response_ids == script.token_ids()
    assert transition.response_logprobs == script.logprobs()


def test_routes_are_in_the_openapi_schema(srig: GatewayRig) -> None:
    paths = httpx.get(f"{srig.url}/openapi.json").json()["paths"]
    for prefix in ("/v1", "/rollouts/{rollout_id}/v1", "/rollouts/{rollout_id}/attempts/{attempt}/v1"):
        assert "post" in paths[prefix + "/responses"] and "post" in paths[prefix + "/messages"]


@pytest.mark.parametrize("stream", [False, True])
def test_engine_upstream_records_exact_ids(engine_rig: GatewayRig, tiny_engine: Any, stream: bool) -> None:
    rollout_id, base_url, key = engine_rig.session()
    result = client(base_url, key).responses.create(
        model="policy", instructions="Count.", input="One, two,", max_output_tokens=6, stream=stream
    )
    if stream:
        events = list(result)  # type: ignore[arg-type]
        text = events[-1].response.output_text  # type: ignore[union-attr]
    else:
        text = result.output_text  # type: ignore[union-attr]
    span = only_span(engine_rig, rollout_id)
    choice = span.attributes["choices"][0]
    messages = [{"role": "system", "content": "Count."}, {"role": "user", "content": "One, two,"}]
    assert span.attributes["prompt_token_ids"] == tiny_engine.chat_prompt_ids(messages)
    assert choice["text"] == text and 0 < len(choice["token_ids"]) <= 6
    assert len(choice["logprobs"]) == len(choice["token_ids"])
    [transition] = build_transitions(engine_rig.store, [rollout_id]).transitions
    assert transition.response_ids == choice["token_ids"]


DATA_URL = f"data:image/png;base64,{PIXEL}"
IMAGE_INPUT = [
    {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "What is this?"},
            {"type": "input_image", "image_url": DATA_URL, "detail": "low"},
        ],
    }
]


def test_an_image_reaches_the_upstream_as_a_chat_image_part_and_is_recorded(
    srig: GatewayRig, script: Script
) -> None:
    rollout_id, base_url, key = srig.session()
    reply = client(base_url, key).responses.create(model="policy", input=IMAGE_INPUT)  # type: ignore[arg-type]
    assert reply.output_text == script.text
    assert script.requests[-1]["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": DATA_URL, "detail": "low"}},
            ],
        }
    ]
    attrs = only_span(srig, rollout_id).attributes
    assert attrs["request"]["input"] == IMAGE_INPUT and attrs["choices"][0]["token_ids"] == script.token_ids()


def test_the_built_in_engine_refuses_an_image_naming_why(engine_rig: GatewayRig) -> None:
    _, base_url, key = engine_rig.session()
    with pytest.raises(openai.BadRequestError) as raised:
        client(base_url, key).responses.create(model="policy", input=IMAGE_INPUT)  # type: ignore[arg-type]
    assert "reads text only" in raised.value.body["message"]  # type: ignore[index]
