"""Calls through the gateway with the official openai client, recorded as spans with token ids."""

from __future__ import annotations

import random

import httpx
import openai
import pytest

from tests.gateway.fake_upstream import LOGPROBS, PROMPT_IDS, TOKEN_IDS, WORDS
from tests.rigs import GatewayRig, make_rig
from tether.store import RolloutRequest, RolloutStatus, Task

MESSAGES = [{"role": "user", "content": "What is six times seven?"}]


def client(base_url: str, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)


def only_span(rig: GatewayRig, rollout_id: str):  # noqa: ANN201
    spans = rig.store.query_spans(rollout_id=rollout_id)
    assert len(spans) == 1
    return spans[0]


def test_chat_call_is_recorded_with_token_ids(rig: GatewayRig) -> None:
    rollout_id, base_url, key = rig.session()
    reply = client(base_url, key).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert reply.choices[0].message.content == "".join(WORDS)
    assert reply.choices[0].logprobs is None  # the agent did not ask; the gateway did

    span = only_span(rig, rollout_id)
    attrs = span.attributes
    assert span.name == "llm.chat" and span.status == "ok" and span.attempt == 1
    assert attrs["prompt_token_ids"] == PROMPT_IDS
    assert attrs["choices"][0]["token_ids"] == TOKEN_IDS
    assert attrs["choices"][0]["logprobs"] == LOGPROBS
    assert attrs["choices"][0]["finish_reason"] == "stop"
    assert attrs["request"]["messages"] == MESSAGES
    assert attrs["model"] == "gpt-4o-mini" and attrs["upstream"] == "policy"
    assert attrs["usage"]["completion_tokens"] == len(WORDS)
    assert attrs["latency_ms"] > 0
    assert rig.behaviour.requests[-1]["return_token_ids"] is True


def test_streaming_chat_is_recorded_with_token_ids(rig: GatewayRig) -> None:
    rollout_id, base_url, key = rig.session()
    stream = client(base_url, key).chat.completions.create(model="policy", messages=MESSAGES, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "".join(WORDS)

    attrs = only_span(rig, rollout_id).attributes
    assert attrs["stream"] is True
    assert attrs["prompt_token_ids"] == PROMPT_IDS
    assert attrs["choices"][0]["token_ids"] == TOKEN_IDS
    assert attrs["choices"][0]["logprobs"] == LOGPROBS
    assert attrs["choices"][0]["text"] == text


@pytest.mark.parametrize("stream", [False, True])
def test_completions_are_recorded(rig: GatewayRig, stream: bool) -> None:
    rollout_id, base_url, key = rig.session()
    result = client(base_url, key).completions.create(model="policy", prompt="Say it:", stream=stream)
    text = "".join(c.choices[0].text for c in result) if stream else result.choices[0].text
    assert text == "".join(WORDS)
    attrs = only_span(rig, rollout_id).attributes
    assert attrs["call"] == "completions"
    assert attrs["choices"][0]["token_ids"] == TOKEN_IDS
    assert attrs["choices"][0]["logprobs"] == LOGPROBS


@pytest.mark.parametrize("stream", [False, True])
def test_missing_token_ids_are_recorded_as_absent(tmp_path, upstream_url, behaviour, stream: bool) -> None:
    behaviour.with_ids = False
    for rig in make_rig(tmp_path, upstream_url, behaviour):
        rollout_id, base_url, key = rig.session()
        result = client(base_url, key).chat.completions.create(
            model="policy", messages=MESSAGES, stream=stream
        )
        if stream:
            list(result)
        attrs = only_span(rig, rollout_id).attributes
        assert attrs["prompt_token_ids"] is None
        assert attrs["choices"][0]["token_ids"] is None
        assert attrs["choices"][0]["logprobs"] == LOGPROBS


def test_transient_upstream_failures_are_retried(rig: GatewayRig) -> None:
    rig.behaviour.fail_next = 2
    rollout_id, base_url, key = rig.session()
    reply = client(base_url, key).chat.completions.create(model="policy", messages=MESSAGES)
    assert reply.choices[0].message.content == "".join(WORDS)
    assert len(rig.behaviour.requests) == 3
    assert only_span(rig, rollout_id).status == "ok"


@pytest.mark.parametrize("stream", [False, True])
def test_dead_upstream_gives_openai_error_and_error_span(rig: GatewayRig, stream: bool) -> None:
    rig.behaviour.fail_next = 100
    rollout_id, base_url, key = rig.session()
    with pytest.raises(openai.APIStatusError) as raised:
        client(base_url, key).chat.completions.create(model="policy", messages=MESSAGES, stream=stream)
    assert raised.value.status_code == 502
    assert "failed after 3 attempts" in raised.value.message
    span = only_span(rig, rollout_id)
    assert span.status == "error"
    assert span.attributes["error"]["code"] == "upstream_unavailable"


def test_upstream_client_error_is_passed_through_not_retried(rig: GatewayRig) -> None:
    rig.behaviour.fail_next, rig.behaviour.fail_status = 1, 400
    _, base_url, key = rig.session()
    with pytest.raises(openai.BadRequestError) as raised:
        client(base_url, key).chat.completions.create(model="policy", messages=MESSAGES)
    assert "upstream overloaded" in raised.value.message
    assert len(rig.behaviour.requests) == 1


def test_hanging_upstream_times_out(tmp_path, upstream_url, behaviour) -> None:
    behaviour.hang_s = 5
    for rig in make_rig(tmp_path, upstream_url, behaviour, timeout_s=0.2, max_retries=1):
        rollout_id, base_url, key = rig.session()
        with pytest.raises(openai.APIStatusError) as raised:
            client(base_url, key).chat.completions.create(model="policy", messages=MESSAGES)
        assert raised.value.status_code == 502
        assert only_span(rig, rollout_id).status == "error"


def test_calls_are_attributed_to_their_own_rollout(rig: GatewayRig) -> None:
    first, first_url, first_key = rig.session()
    second, second_url, second_key = rig.session()
    client(first_url, first_key).chat.completions.create(model="policy", messages=MESSAGES)
    for _ in range(2):
        client(second_url, second_key).chat.completions.create(model="policy", messages=MESSAGES)
    assert len(rig.store.query_spans(rollout_id=first)) == 1
    assert len(rig.store.query_spans(rollout_id=second)) == 2


def test_a_retried_attempt_keeps_its_calls_whatever_the_process_seeded(rig: GatewayRig) -> None:
    """Span ids come from the OS, not the process-global `random` the trainer seeds: a restarted run that
    seeds it again would repeat the ids, and the store would drop the retried attempt's calls as copies."""
    (rollout,) = rig.store.enqueue([RolloutRequest(task=Task(input={"q": 1}), max_attempts=2)])
    saved = random.getstate()
    try:
        for attempt in (1, 2):
            claim = rig.store.claim("worker")
            assert claim is not None and claim.attempt.number == attempt
            creds = rig.gateway.credentials(rollout.id, attempt)
            random.seed(0)  # as each start of `tether train` does
            client(creds["base_url"], creds["api_key"]).chat.completions.create(
                model="policy", messages=MESSAGES
            )
            rig.store.update_status(rollout.id, RolloutStatus.failed, attempt=attempt)
    finally:
        random.setstate(saved)
    spans = rig.store.query_spans(rollout_id=rollout.id)
    assert sorted(span.attempt for span in spans) == [1, 2]
    assert len({(span.trace_id, span.span_id) for span in spans}) == 2


def test_models_lists_routes(rig: GatewayRig) -> None:
    _, base_url, key = rig.session()
    assert [m.id for m in client(base_url, key).models.list()] == ["policy"]


def test_gateway_serves_store_api_with_admin_token(rig: GatewayRig) -> None:
    rollout_id, base_url, key = rig.session()
    client(base_url, key).chat.completions.create(model="policy", messages=MESSAGES)
    headers = {"Authorization": f"Bearer {rig.auth.admin_token}"}
    spans = httpx.get(f"{rig.url}/store/spans", params={"rollout_id": rollout_id}, headers=headers).json()
    assert len(spans) == 1 and spans[0]["attributes"]["choices"][0]["token_ids"] == TOKEN_IDS


def test_run_imposed_sampling_overrides_reach_the_upstream(rig: GatewayRig) -> None:
    from tether.store import RolloutRequest, Task

    request = RolloutRequest(
        task=Task(input={}), mode="val", metadata={"sampling_overrides": {"temperature": 0.0}}
    )
    rollout_id = rig.store.enqueue([request])[0].id
    rig.store.claim("worker")
    creds = rig.gateway.credentials(rollout_id)
    client(creds["base_url"], creds["api_key"]).chat.completions.create(
        model="policy", messages=MESSAGES, temperature=1.5
    )
    assert rig.behaviour.requests[-1]["temperature"] == 0.0
    span = only_span(rig, rollout_id)
    assert span.attributes["overrides"] == {"temperature": 0.0}
    assert span.attributes["request"]["temperature"] == 0.0
