"""Bad requests get an OpenAI-style 4xx that says what is wrong, and no model call is recorded: at most the
refusal, kept as a `gateway.refused` span of its attempt when the request named one."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.rigs import GatewayRig
from tether.contracts import REFUSED_CALL_SPAN
from tether.store import RolloutStatus

CHAT = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}


def post(url: str, key: str | None, body: object = CHAT, **kwargs: object) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if isinstance(body, bytes):
        return httpx.post(
            url, content=body, headers={**headers, "Content-Type": "application/json"}, **kwargs
        )
    return httpx.post(url, json=body, headers=headers, **kwargs)


def error_of(response: httpx.Response) -> dict:
    error = response.json()["error"]
    assert error["message"] and error["type"]
    return error


def assert_nothing_recorded(rig: GatewayRig) -> None:
    assert {span.name for span in rig.store.query_spans()} <= {REFUSED_CALL_SPAN}  # no model call
    assert rig.behaviour.requests == []


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "JSON object"),
        ({"messages": [{"role": "user", "content": "hi"}]}, 400, "'model'"),
        ({**CHAT, "model": 7}, 400, "'model'"),
    ],
)
def test_malformed_requests(rig: GatewayRig, body: object, status: int, needle: str) -> None:
    _, base_url, key = rig.session()
    response = post(f"{base_url}/chat/completions", key, body)
    assert response.status_code == status
    assert needle in error_of(response)["message"]
    assert_nothing_recorded(rig)


def test_oversized_body_is_refused(rig: GatewayRig) -> None:
    rig.gateway.config.max_body_bytes = 1000
    _, base_url, key = rig.session()
    body = {**CHAT, "messages": [{"role": "user", "content": "x" * 5000}]}
    response = post(f"{base_url}/chat/completions", key, body)
    assert response.status_code == 413
    assert error_of(response)["code"] == "request_too_large"
    assert_nothing_recorded(rig)


def test_model_rejected_by_route_map(rig: GatewayRig) -> None:
    rig.gateway.config.routes = {"writer": "policy"}
    _, base_url, key = rig.session()
    response = post(f"{base_url}/chat/completions", key, {**CHAT, "model": "gpt-9"})
    assert response.status_code == 404
    error = error_of(response)
    assert error["code"] == "model_not_found" and "writer" in error["message"]
    assert_nothing_recorded(rig)


def test_missing_and_invalid_keys(rig: GatewayRig) -> None:
    _, base_url, _ = rig.session()
    assert post(f"{base_url}/chat/completions", None).status_code == 401
    response = post(f"{base_url}/chat/completions", "sk-not-ours")
    assert response.status_code == 401 and error_of(response)["type"] == "authentication_error"
    forged = rig.auth.rollout_token("ro-1", 1).rsplit(".", 1)[0] + ".deadbeef"
    assert post(f"{base_url}/chat/completions", forged).status_code == 401
    assert_nothing_recorded(rig)


def test_foreign_token_is_forbidden(rig: GatewayRig) -> None:
    _, base_url, _ = rig.session()
    _, _, other_key = rig.session()
    response = post(f"{base_url}/chat/completions", other_key)
    assert response.status_code == 403
    assert "another rollout" in error_of(response)["message"]
    assert_nothing_recorded(rig)


def test_unknown_rollout(rig: GatewayRig) -> None:
    url = f"{rig.url}/rollouts/ro-missing/v1/chat/completions"
    response = post(url, rig.auth.rollout_token("ro-missing", 1))
    assert response.status_code == 404
    assert "ro-missing" in error_of(response)["message"]


def test_token_expires_with_its_rollout(rig: GatewayRig) -> None:
    rollout_id, base_url, key = rig.session()
    llm = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    llm.chat.completions.create(**CHAT)
    rig.store.update_status(rollout_id, RolloutStatus.succeeded)
    with pytest.raises(openai.AuthenticationError) as raised:
        llm.chat.completions.create(**CHAT)
    assert "succeeded" in raised.value.message
    assert len(rig.store.query_spans(rollout_id=rollout_id)) == 1


def test_a_path_naming_another_attempt_is_refused(rig: GatewayRig) -> None:
    rollout_id, _, key = rig.session()
    url = f"{rig.url}/rollouts/{rollout_id}/attempts/7/v1/chat/completions"
    response = post(url, key)
    assert response.status_code == 403 and "attempt 1" in error_of(response)["message"]
    admin = post(url, rig.auth.admin_token)  # the admin may name an attempt: only the current one works
    assert admin.status_code == 409 and error_of(admin)["code"] == "stale_attempt"
    assert_nothing_recorded(rig)


def test_invalid_sampling_parameters(rig: GatewayRig) -> None:
    # validated by the engine upstream; the HTTP upstream forwards and passes the upstream's verdict on
    _, base_url, key = rig.session()
    rig.behaviour.fail_next, rig.behaviour.fail_status = 1, 422
    response = post(f"{base_url}/chat/completions", key, {**CHAT, "temperature": "hot"})
    assert response.status_code == 422
    assert "rejected the request" in error_of(response)["message"]


def test_admin_routes_refuse_rollout_tokens(rig: GatewayRig) -> None:
    _, _, key = rig.session()
    assert post(f"{rig.url}/admin/pause", key, {}).status_code == 403
    assert post(f"{rig.url}/admin/pause", None, {}).status_code == 401
    assert rig.gateway.admission.paused is False
    admin = {"Authorization": f"Bearer {rig.auth.admin_token}"}
    assert httpx.get(f"{rig.url}/admin/status", headers=admin).status_code == 200


def test_an_unsupported_endpoint_is_named_in_an_openai_error(rig: GatewayRig) -> None:
    _, base_url, api_key = rig.session()
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    with pytest.raises(openai.NotFoundError) as caught:
        client.embeddings.create(model="policy", input="hello")
    error = caught.value.body
    assert isinstance(error, dict) and error["code"] == "unsupported_endpoint"
    assert "/embeddings" in error["message"] and "chat/completions" in error["message"]
    wrong_method = httpx.get(f"{base_url}/chat/completions", headers={"Authorization": f"Bearer {api_key}"})
    assert wrong_method.status_code == 405 and "GET" in wrong_method.json()["error"]["message"]
