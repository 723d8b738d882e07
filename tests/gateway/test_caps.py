"""Per-request caps: a call asking for more choices than the gateway allows is refused with a 400 that
names the field and the cap, before the model runs; one asking for more tokens is served with the cap,
its span recording what it asked; at the caps a call is served as it is."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.rigs import GatewayRig
from tether.contracts import DEFAULT_MAX_TOKENS_CAP, DEFAULT_N_CAP, REFUSED_CALL_SPAN, CallAttr, is_call_span
from tether.limits import AgentQuota

CHAT = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}
ROUTES: dict[str, dict[str, Any]] = {
    "chat/completions": CHAT,
    "completions": {"model": "policy", "prompt": "hi"},
    "responses": {"model": "policy", "input": "hi"},
    "messages": {**CHAT, "max_tokens": 16},
}
OVER_CAP = [
    ("chat/completions", "n", DEFAULT_N_CAP + 1, DEFAULT_N_CAP),
    ("completions", "n", 16, DEFAULT_N_CAP),
    ("completions", "best_of", 16, DEFAULT_N_CAP),
]
# (route, field, value asked, the field as the upstream's chat or completions request names it)
OVER_TOKEN_CAP = [
    ("chat/completions", "max_tokens", 10**9, "max_tokens"),
    ("chat/completions", "max_tokens", 1e9, "max_tokens"),
    ("chat/completions", "max_completion_tokens", DEFAULT_MAX_TOKENS_CAP + 1, "max_completion_tokens"),
    ("completions", "max_tokens", DEFAULT_MAX_TOKENS_CAP + 1, "max_tokens"),
    ("responses", "max_output_tokens", DEFAULT_MAX_TOKENS_CAP + 1, "max_tokens"),
    ("messages", "max_tokens", 64000, "max_tokens"),  # pydantic-ai's default for Claude models
]


def post(rig: GatewayRig, route: str, body: dict[str, Any]) -> tuple[str, httpx.Response]:
    rollout_id, base_url, key = rig.session()
    return rollout_id, httpx.post(
        f"{base_url}/{route}", json=body, headers={"Authorization": f"Bearer {key}"}
    )


def error_message(response: httpx.Response) -> str:
    return str(response.json()["error"]["message"])


@pytest.mark.parametrize(("route", "name", "value", "cap"), OVER_CAP)
def test_a_call_over_a_cap_is_refused_naming_the_field_and_the_cap(
    rig: GatewayRig, route: str, name: str, value: float, cap: int
) -> None:
    rollout_id, response = post(rig, route, {**ROUTES[route], name: value})
    assert response.status_code == 400, response.text
    message = error_message(response)
    assert f"'{name}'" in message and str(cap) in message
    if route != "messages":  # Anthropic's error shape has no param or code
        error = response.json()["error"]
        assert error["param"] == name and error["code"] == "integer_above_max_value"
    assert rig.behaviour.requests == []  # never reached the model
    # ...and the refusal is kept, so a run shows it: the request as sent and the error, not a model call
    [refusal] = rig.store.query_spans(rollout_id=rollout_id)
    assert refusal.name == REFUSED_CALL_SPAN and not is_call_span(refusal.name)
    request = refusal.attributes[CallAttr.REQUEST]  # its scalar fields; of the others, only their kind
    assert request[name] == value and not any(isinstance(v, dict | list) for v in request.values())
    assert refusal.status == "error" and refusal.status_message == message


@pytest.mark.parametrize(("route", "name", "value", "upstream_name"), OVER_TOKEN_CAP)
def test_a_call_over_the_token_cap_is_served_with_the_cap_and_says_what_it_asked(
    rig: GatewayRig, route: str, name: str, value: float, upstream_name: str
) -> None:
    rollout_id, response = post(rig, route, {**ROUTES[route], name: value})
    assert response.status_code == 200, response.text
    assert rig.behaviour.requests[0][upstream_name] == DEFAULT_MAX_TOKENS_CAP
    [call] = rig.store.query_spans(rollout_id=rollout_id)
    assert is_call_span(call.name) and call.status == "ok"
    assert call.attributes[CallAttr.LOWERED] == {name: value}
    assert call.attributes[CallAttr.REQUEST][name] == DEFAULT_MAX_TOKENS_CAP


def test_refused_calls_are_kept_only_within_the_attempts_span_quota(rig: GatewayRig) -> None:
    """An agent cannot grow the store by being refused: the refusals' spans are charged to its quota,
    beyond which they are answered the same but not kept."""
    rig.gateway.span_ledger.quota = AgentQuota(max_spans=2)
    rollout_id, base_url, key = rig.session()
    over = {**CHAT, "n": DEFAULT_N_CAP + 1}
    for _ in range(4):
        response = httpx.post(
            f"{base_url}/chat/completions", json=over, headers={"Authorization": f"Bearer {key}"}
        )
        assert response.status_code == 400
    assert [span.name for span in rig.store.query_spans(rollout_id=rollout_id)] == [REFUSED_CALL_SPAN] * 2
    served = httpx.post(f"{base_url}/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {key}"})
    assert served.status_code == 200  # the model calls it makes are recorded whatever its quota
    assert sum(is_call_span(span.name) for span in rig.store.query_spans(rollout_id=rollout_id)) == 1


def test_a_call_at_the_caps_is_served(rig: GatewayRig) -> None:
    body = {**CHAT, "max_tokens": DEFAULT_MAX_TOKENS_CAP, "n": DEFAULT_N_CAP}
    rollout_id, response = post(rig, "chat/completions", body)
    assert response.status_code == 200, response.text
    assert rig.behaviour.requests[0]["max_tokens"] == DEFAULT_MAX_TOKENS_CAP
    [call] = rig.store.query_spans(rollout_id=rollout_id)
    assert CallAttr.LOWERED not in call.attributes


def test_the_caps_are_the_gateways_config(rig: GatewayRig) -> None:
    rig.gateway.config.max_tokens_cap, rig.gateway.config.n_cap = 100, 2
    _, base_url, key = rig.session()
    llm = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    with pytest.raises(openai.BadRequestError, match="cap of 2"):
        llm.chat.completions.create(**CHAT, n=3)
    llm.chat.completions.create(**CHAT, max_tokens=101, n=2)
    assert [request["max_tokens"] for request in rig.behaviour.requests] == [100]


def test_values_of_the_wrong_type_are_left_to_the_upstream(rig: GatewayRig) -> None:
    # The caps judge numbers only: the engine (or the upstream) says what is wrong with the rest.
    _, response = post(rig, "chat/completions", {**CHAT, "max_tokens": "lots"})
    assert response.status_code == 200 and rig.behaviour.requests[0]["max_tokens"] == "lots"
