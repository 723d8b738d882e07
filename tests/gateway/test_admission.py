"""Pausing admission holds new calls (the agent sees latency, not an error) until resume."""

from __future__ import annotations

import threading

import httpx
import openai

from tests.rigs import GatewayRig, make_rig

CHAT = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}


def admin(rig: GatewayRig, method: str, path: str, body: dict | None = None) -> dict:
    response = httpx.request(
        method,
        rig.url + path,
        json=body,
        headers={"Authorization": f"Bearer {rig.auth.admin_token}"},
        timeout=30,
    )
    response.raise_for_status()
    return response.json()


def wait_until_waiting(rig: GatewayRig, count: int) -> None:
    for _ in range(2000):
        if admin(rig, "GET", "/admin/status")["waiting"] == count:
            return
    raise AssertionError("the call never reached the paused gateway")


def test_paused_calls_wait_and_complete_after_resume(rig: GatewayRig) -> None:
    rollout_id, base_url, key = rig.session()
    assert admin(rig, "POST", "/admin/pause", {"drain": True})["drained"] is True
    results: list[str] = []
    agent = threading.Thread(
        target=lambda: results.append(
            openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
            .chat.completions.create(**CHAT)
            .choices[0]
            .message.content
            or ""
        )
    )
    agent.start()
    wait_until_waiting(rig, 1)
    assert results == [] and rig.behaviour.requests == []
    admin(rig, "POST", "/admin/resume")
    agent.join(timeout=30)
    assert results and results[0]
    assert len(rig.store.query_spans(rollout_id=rollout_id)) == 1


def test_hold_limit_answers_retryable_429(tmp_path, upstream_url, behaviour) -> None:
    for rig in make_rig(tmp_path, upstream_url, behaviour):
        rig.gateway.admission.hold_limit_s = 0.05
        _, base_url, key = rig.session()
        admin(rig, "POST", "/admin/pause", {"drain": False})
        response = httpx.post(
            f"{base_url}/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {key}"}
        )
        assert response.status_code == 429
        assert response.headers["retry-after"]
        assert response.json()["error"]["code"] == "paused"
