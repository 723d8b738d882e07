"""Property-based tests of what agents send the gateway: body parsing, sampling parameters, chat
rendering, reward events. Bad input is a GatewayError with a 4xx, never an unhandled exception."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.rigs import GatewayRig
from tether.engines.base import SamplingParams
from tether.gateway.app import Gateway
from tether.gateway.errors import GatewayError
from tether.gateway.events import reward_from_event
from tether.policy_server.builtin import EngineUpstream, sampling_params

INT64 = 2**63
SETTINGS = settings(deadline=None, suppress_health_check=list(HealthCheck), database=None)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
SAMPLING_KEYS = ["max_tokens", "max_completion_tokens", "temperature", "top_p", "seed", "stop", "n"]
sampling_bodies = st.dictionaries(st.sampled_from(SAMPLING_KEYS), json_values, max_size=6)


def assert_client_error(error: GatewayError) -> None:
    assert 400 <= error.status < 500
    assert error.message and error.body()["error"]["type"]


# Random bodies are rarely valid in every key: the examples make sure valid ones are checked too.
@SETTINGS
@given(body=sampling_bodies, prompt_len=st.integers(0, 5000), context=st.integers(1, 4096))
@example(body={"seed": 7, "temperature": 0.5, "max_tokens": 3}, prompt_len=2, context=10)
def test_sampling_params_are_valid_or_a_4xx(body: dict[str, Any], prompt_len: int, context: int) -> None:
    try:
        params = sampling_params(body, prompt_len, context)
    except GatewayError as error:
        assert_client_error(error)
        return
    assert isinstance(params, SamplingParams)
    assert 1 <= params.max_tokens <= context - prompt_len
    assert 0.0 <= params.temperature <= 2.0 and 0.0 <= params.top_p <= 1.0
    assert not math.isnan(params.temperature) and not math.isnan(params.top_p)
    assert all(isinstance(stop, str) for stop in params.stop)
    # The agent's seed, unchanged (none: None); the engine seeds a 64-bit generator with seed + choice index.
    assert params.seed == body.get("seed")
    assert -INT64 <= (params.seed or 0) < INT64


@SETTINGS
@given(raw=st.binary(max_size=64) | json_values.map(lambda v: repr(v).encode()))
def test_body_parsing_gives_an_object_or_a_400(raw: bytes) -> None:
    try:
        body = Gateway.parse_body(raw)
    except GatewayError as error:
        assert error.status == 400
        return
    assert isinstance(body, dict)


@SETTINGS
@given(
    event=st.dictionaries(
        st.sampled_from(["value", "reward", "name", "span_id", "event_type", "data"]), json_values
    )
)
@example(event={"event_type": "reward", "data": {"value": -2, "name": "style", "span_id": "s1"}})
@example(event={"reward": 0.5})
def test_reward_events_are_parsed_or_a_400(event: dict[str, Any]) -> None:
    try:
        value, name, span_id = reward_from_event(event)
    except GatewayError as error:
        assert error.status == 400
        return
    # What was sent: the event's own fields, or its `data` when it is a reward event.
    nested = event.get("data")
    sent = nested if event.get("event_type") == "reward" and isinstance(nested, dict) else event
    assert not math.isnan(value) and value == float(sent.get("value", sent.get("reward")))
    assert name == sent.get("name", "reward") and span_id == sent.get("span_id")


content = (
    st.text(max_size=30)
    | st.none()
    | json_values
    | st.lists(
        st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url", "x"]), "text": json_values}),
        max_size=3,
    )
)
message = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(["system", "user", "assistant", "tool"]) | json_values,
        "content": content,
        "name": json_values,
        "tool_calls": json_values,
    },
)
messages = st.lists(message | json_values, max_size=4) | json_values
tools = (
    st.none()
    | json_values
    | st.lists(st.fixed_dictionaries({"type": st.just("function"), "function": json_values}), max_size=2)
)


@SETTINGS
@given(
    kind=st.sampled_from(["chat", "completions"]),
    messages=messages,
    prompt=json_values | st.lists(st.integers(-5, 60_000), max_size=6),
    tools=tools,
    sampling=sampling_bodies,
)
def test_prompt_rendering_and_preparation_are_valid_or_a_4xx(
    tiny_engine: object,
    kind: str,
    messages: Any,
    prompt: Any,
    tools: Any,
    sampling: dict[str, Any],
) -> None:
    upstream = EngineUpstream(tiny_engine)  # type: ignore[arg-type]
    body = {"model": "policy", "messages": messages, "prompt": prompt, "tools": tools, **sampling}
    try:
        prepared = upstream._prepare(kind, body)  # type: ignore[arg-type]
    except GatewayError as error:
        assert_client_error(error)
        return
    prompt_ids, per_choice = prepared[0], prepared[1]
    # An empty prompt (e.g. "") gets through here; the engine refuses it with a 400 (ValueError).
    assert all(isinstance(t, int) for t in prompt_ids)
    assert 1 <= len(per_choice) <= 16


# -- whole calls through the real gateway and the tiny engine -------------------------------------------

small_or_bad_max_tokens = st.integers(1, 3) | st.integers(-3, 0) | st.text(max_size=3) | st.none()
call_bodies = st.fixed_dictionaries(
    {"model": st.just("policy") | json_values, "max_tokens": small_or_bad_max_tokens},
    optional={
        "messages": messages,
        "temperature": json_values,
        "top_p": json_values,
        "seed": st.integers(-(2**70), 2**70) | json_values,
        "n": st.integers(1, 2) | json_values,
        "stop": json_values,
        "stream": st.booleans() | json_values,
        "stream_options": json_values,
        "logprobs": json_values,
        "return_token_ids": json_values,
        "tools": tools,
    },
)


@pytest.fixture
def session(engine_rig: GatewayRig) -> tuple[GatewayRig, str, str]:
    _, base_url, key = engine_rig.session()
    return engine_rig, base_url, key


@settings(SETTINGS, max_examples=40)
@given(body=call_bodies)
@example(
    body={"model": "policy", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}], "stream": True}
)
@example(body={"model": "policy", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
def test_chat_calls_never_answer_5xx(session: tuple[GatewayRig, str, str], body: dict[str, Any]) -> None:
    _, base_url, key = session
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    # Python's json writes NaN and Infinity, which agents' JSON libraries sometimes send too.
    raw = json.dumps(body).encode()
    response = httpx.post(f"{base_url}/chat/completions", content=raw, headers=headers, timeout=60)
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert response.json()["error"]["message"]
        return
    streamed = "text/event-stream" in response.headers.get("content-type", "")
    assert streamed == bool(body.get("stream"))
    if not streamed:
        assert response.json()["choices"]
        return
    # Chunks, then `[DONE]` once the call is recorded, or an error event as the last word.
    *chunks, last = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    assert all("error" not in json.loads(chunk) for chunk in chunks)
    if last == "[DONE]":
        assert chunks
    else:
        assert json.loads(last)["error"]["message"]


def test_overflowing_seed_fails_only_its_own_call(tiny_engine: object) -> None:
    """A seed outside 64 bits used to reach the engine's batch and fail the other rollouts' calls too."""
    upstream = EngineUpstream(tiny_engine)  # type: ignore[arg-type]
    ok = {"model": "p", "prompt": [1, 2, 3], "max_tokens": 2, "temperature": 1.0, "seed": 1}

    async def both() -> list[Any]:
        bad = {**ok, "seed": 2**64}
        return await asyncio.gather(
            upstream.call("completions", bad), upstream.call("completions", ok), return_exceptions=True
        )

    bad_result, ok_result = asyncio.run(both())
    assert isinstance(bad_result, GatewayError) and bad_result.status == 400
    assert bad_result.param == "seed"
    assert not isinstance(ok_result, BaseException)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"content": "no role"}]}, "messages"),  # the template raised a jinja error: a 500
        (
            {"messages": [{"role": "user", "content": "hi"}], "stream": True, "stream_options": "x"},
            "stream_options",
        ),
        ({"messages": [{"role": "user", "content": "hi"}], "seed": 2**64}, "seed"),
    ],
    ids=["message-without-role", "stream-options-not-an-object", "seed-beyond-64-bits"],
)
def test_inputs_that_used_to_fail_inside_the_gateway_are_a_400(
    session: tuple[GatewayRig, str, str], body: dict[str, Any], param: str
) -> None:
    rig, base_url, key = session
    body = {"model": "policy", "max_tokens": 2, **body}
    response = httpx.post(
        f"{base_url}/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
