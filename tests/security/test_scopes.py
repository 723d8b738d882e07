"""Every route of the gateway app (which also serves the store API and the OTLP receiver), probed with a
rollout token, with no token and with an expired token. A rollout token reaches only its own rollout's
model calls, spans, rewards and heartbeat, plus the shared resources and the model list; everything
else, and anything naming another rollout, is refused."""

from __future__ import annotations

import re
from typing import Any

import httpx

from tests.rigs import GatewayRig
from tether.compose import create_app
from tether.store import RolloutStatus

PUBLIC = {"/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}
# Routes a live rollout token may use when the path names no other rollout.
ROLLOUT_ALLOWED = re.compile(
    r"^/v1/(chat/completions|completions|responses|messages|models|traces)$|^/store/resources"
)


def routes(rig: GatewayRig) -> list[tuple[str, str]]:
    """Every (method, path) of the served app, from its OpenAPI schema."""
    paths = create_app(rig.gateway).openapi()["paths"]
    return [(method.upper(), path) for path, item in paths.items() for method in item]


def body_for(other: str) -> dict[str, Any]:
    """One body with every field any route wants, each naming the other rollout where it names one."""
    return {
        "spans": [{"rollout_id": other, "name": "x", "start_time": 1.0}],
        "rewards": [{"rollout_id": other, "value": 1.0}],
        "requests": [{"task": {}}],
        "rollout_ids": [other],
        "worker_id": "thief",
        "attempt": 1,
        "status": "failed",
        "kind": "text",
        "value": 1.0,
        "heartbeat_timeout": 0,
        "routes": {"*": "policy"},
        "name": "stolen",
        "base_url": "http://127.0.0.1:9",
        "drain": False,
        "model": "policy",
        "messages": [{"role": "user", "content": "hi"}],
        "prompt": "hi",
        "input": {"q": "hi"},
        "max_tokens": 2,
        "resourceSpans": [],
    }


def fill(path: str, rollout_id: str) -> str:
    return path.replace("{rollout_id}", rollout_id).replace("{attempt}", "1").replace("{name}", "p")


def send(rig: GatewayRig, method: str, path: str, token: str | None, other: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body = None if method in ("GET", "DELETE") else body_for(other)
    return httpx.request(method, rig.url + path, json=body, headers=headers, timeout=30)


def test_a_rollout_token_reaches_only_its_own_rollout(rig: GatewayRig) -> None:
    own, _, key = rig.session()
    other, _, _ = rig.session()
    refused, allowed = [], []
    for method, template in routes(rig):
        if template in PUBLIC:
            continue
        path = fill(template, other)
        response = send(rig, method, path, key, other)
        if "{rollout_id}" not in template and ROLLOUT_ALLOWED.search(template):
            assert other not in response.text, f"{method} {path} shows the other rollout"
            allowed.append(path)
        else:
            assert response.status_code in (401, 403), f"{method} {path}: {response.status_code}"
            refused.append(path)
    assert len(refused) > 20 and allowed
    # Nothing the probes sent reached the other rollout, nor changed the server.
    assert rig.store.query_spans(rollout_id=other) == [] and rig.store.query_rewards(other) == []
    assert rig.store.get_rollout(other).status == RolloutStatus.running
    assert rig.gateway.admission.paused is False and "stolen" not in rig.gateway.upstreams


def test_no_token_and_an_expired_token_reach_nothing(rig: GatewayRig) -> None:
    own, _, key = rig.session()
    rig.store.update_status(own, RolloutStatus.succeeded)
    for method, template in routes(rig):
        if template in PUBLIC:
            continue
        path = fill(template, own)
        anonymous = send(rig, method, path, None, own)
        assert anonymous.status_code == 401, f"{method} {path}: {anonymous.text}"
        assert anonymous.json()["error"]["type"] == "authentication_error"
        expired = send(rig, method, path, key, own)
        # 401 "expired", or 403 where the route needs the admin token anyway
        assert expired.status_code in (401, 403), f"{method} {path} with an expired key: {expired.text}"


def test_admin_routes_need_the_admin_token(rig: GatewayRig) -> None:
    _, _, key = rig.session()
    forged = rig.auth.admin_token[:-1] + ("0" if rig.auth.admin_token[-1] != "0" else "1")
    for method, template in routes(rig):
        if not template.startswith("/admin"):
            continue
        path = fill(template, "ro-x")
        for token, status in ((None, 401), (forged, 401), (key, 403)):
            assert send(rig, method, path, token, "ro-x").status_code == status, (method, path, token)
