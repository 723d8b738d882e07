"""An agent cannot flood the store with spans: what it sends with its rollout token (the store API's
`POST /store/spans`, the gateway's OTLP receiver) is capped per attempt, in spans and in bytes, and per
request in bytes; refusals are 413 (too large for any attempt) or 429 (this attempt's quota is used up)
and name the option that raises the limit. The gateway's own records of the agent's model calls are never
counted, refused or lost. Everything runs through a real gateway on 127.0.0.1 over a real SQLite file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gateway.fake_upstream import Behaviour
from tests.helpers import serve_app
from tests.rigs import GatewayRig
from tether.compose import create_app
from tether.contracts import Origin
from tether.gateway import Gateway, GatewayConfig, HTTPUpstream, HTTPUpstreamConfig
from tether.limits import AgentQuota
from tether.store import SQLiteStore
from tether.store.auth import TokenAuthority

QUOTA = AgentQuota(max_request_bytes=64 * 1024, max_spans=6, max_span_bytes=16 * 1024)
CHAT = {"model": "policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"


@pytest.fixture
def capped(tmp_path: Path, upstream_url: str, behaviour: Behaviour) -> Iterator[GatewayRig]:
    """A gateway whose agents may send 6 spans, 16 KiB of them, in requests of 64 KiB at most."""
    store = SQLiteStore(tmp_path / "store.db")
    auth = TokenAuthority.generate()
    gateway = Gateway(store, auth, GatewayConfig.for_agents(QUOTA, hold_limit_s=30))
    upstream = HTTPUpstreamConfig(name="policy", base_url=upstream_url, request_token_ids=True)
    gateway.add_upstream(HTTPUpstream(upstream))
    with serve_app(create_app(gateway)) as url:
        gateway.config.public_url = url
        yield GatewayRig(url, gateway, store, auth, behaviour)
    store.close()


def store_spans(rollout_id: str, count: int, filler: int = 0, start: int = 0) -> dict[str, Any]:
    spans = [
        {
            "rollout_id": rollout_id,
            "name": f"step {start + i}",
            "start_time": 1.0,
            "attributes": {"x": "y" * filler},
        }
        for i in range(count)
    ]
    return {"spans": spans}


def otlp_spans(count: int, filler: int = 0, start: int = 0) -> dict[str, Any]:
    spans = [
        {
            "traceId": TRACE_ID,
            "spanId": f"{start + i + 1:016x}",
            "name": f"tool {start + i}",
            "kind": 1,
            "startTimeUnixNano": "1700000000000000000",
            "attributes": [{"key": "x", "value": {"stringValue": "y" * filler}}],
        }
        for i in range(count)
    ]
    return {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": spans}]}]}


def refusal(response: httpx.Response) -> tuple[int, str, str]:
    error = response.json()["error"]
    return response.status_code, error["code"], error["message"]


def agent_spans(rig: GatewayRig, rollout_id: str) -> list[str]:
    return [s.name for s in rig.store.query_spans(rollout_id=rollout_id) if s.origin == Origin.AGENT]


def test_the_store_api_caps_an_attempts_spans_then_refuses_with_429(capped: GatewayRig) -> None:
    rollout_id, _, key = capped.session()
    auth = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=capped.url, headers=auth, timeout=30) as client:
        assert client.post("/store/spans", json=store_spans(rollout_id, 4)).status_code == 204
        over = client.post("/store/spans", json=store_spans(rollout_id, 3, start=4))
        assert client.post("/store/spans", json=store_spans(rollout_id, 2, start=4)).status_code == 204
        used_up = client.post("/store/spans", json=store_spans(rollout_id, 1, start=6))
    status, code, message = refusal(over)
    assert (status, code) == (429, "span_quota_exceeded")
    assert "its 6 spans" in message and "--max-spans-per-attempt" in message and "\n" not in message
    assert refusal(used_up)[:2] == (429, "span_quota_exceeded")
    # A refused request is refused whole: the 3 over the quota are not stored, the 2 that fit are.
    assert agent_spans(capped, rollout_id) == [f"step {i}" for i in range(6)]


def test_the_store_api_caps_an_attempts_span_bytes(capped: GatewayRig) -> None:
    rollout_id, _, key = capped.session()
    auth = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=capped.url, headers=auth, timeout=30) as client:
        assert client.post("/store/spans", json=store_spans(rollout_id, 1, filler=10_000)).status_code == 204
        over = client.post("/store/spans", json=store_spans(rollout_id, 1, filler=10_000, start=1))
        whole = client.post("/store/spans", json=store_spans(rollout_id, 1, filler=20_000, start=2))
    status, code, message = refusal(over)
    assert (status, code) == (429, "span_quota_exceeded")
    assert "16 KiB of spans" in message and "--max-span-mb-per-attempt" in message
    # More than the whole quota in one request: no attempt could ever take it.
    status, code, message = refusal(whole)
    assert (status, code) == (413, "spans_too_large") and "--max-span-mb-per-attempt" in message
    assert agent_spans(capped, rollout_id) == ["step 0"]


def test_the_store_api_refuses_a_body_over_the_request_cap_with_413(capped: GatewayRig) -> None:
    rollout_id, _, key = capped.session()
    auth = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=capped.url, headers=auth, timeout=30) as client:
        response = client.post("/store/spans", json=store_spans(rollout_id, 1, filler=70_000))
        too_many = client.post("/store/spans", json=store_spans(rollout_id, 7))
    status, code, message = refusal(response)
    assert (status, code) == (413, "request_too_large")
    assert "64 KiB limit" in message and "--max-request-mb" in message
    assert refusal(too_many)[:2] == (413, "too_many_spans")
    assert agent_spans(capped, rollout_id) == []


def test_the_otlp_receiver_caps_spans_and_bodies_and_shares_the_quota_with_the_store_api(
    capped: GatewayRig,
) -> None:
    rollout_id, _, key = capped.session()
    auth = {"Authorization": f"Bearer {key}"}
    path = f"/rollouts/{rollout_id}/v1/traces"
    with httpx.Client(base_url=capped.url, headers=auth, timeout=30) as client:
        assert client.post("/store/spans", json=store_spans(rollout_id, 3)).status_code == 204
        assert client.post(path, json=otlp_spans(3)).status_code == 200
        used_up = client.post(path, json=otlp_spans(1, start=3))
        bare = client.post("/v1/traces", json=otlp_spans(1, start=4))
        large = client.post(path, json=otlp_spans(1, filler=70_000, start=5))
    assert refusal(used_up)[:2] == (429, "span_quota_exceeded")
    assert "--max-spans-per-attempt" in refusal(used_up)[2]
    assert refusal(bare)[:2] == (429, "span_quota_exceeded")
    status, code, message = refusal(large)
    assert (status, code) == (413, "request_too_large") and "--max-request-mb" in message
    assert sorted(agent_spans(capped, rollout_id)) == [
        *(f"step {i}" for i in range(3)),
        "tool 0",
        "tool 1",
        "tool 2",
    ]


def test_the_gateway_records_the_agents_calls_after_its_span_quota_is_used_up(capped: GatewayRig) -> None:
    rollout_id, base_url, key = capped.session()
    auth = {"Authorization": f"Bearer {key}"}
    with httpx.Client(headers=auth, timeout=30) as client:
        assert client.post(f"{capped.url}/store/spans", json=store_spans(rollout_id, 6)).status_code == 204
        refused = client.post(f"{capped.url}/store/spans", json=store_spans(rollout_id, 1, start=6))
        assert refused.status_code == 429
        calls = [client.post(f"{base_url}/chat/completions", json=CHAT) for _ in range(8)]
        streamed = client.post(f"{base_url}/chat/completions", json={**CHAT, "stream": True})
    assert [call.status_code for call in calls] == [200] * 8 and streamed.status_code == 200
    recorded = [s for s in capped.store.query_spans(rollout_id=rollout_id) if s.origin == Origin.GATEWAY]
    assert len(recorded) == 9  # more than the agent's whole span quota, each one kept
    assert capped.gateway.span_ledger.used(rollout_id, 1).spans == 6  # the calls counted against nothing


def test_the_admin_token_is_not_held_to_an_agents_quota(capped: GatewayRig) -> None:
    rollout_id, _, _ = capped.session()
    auth = {"Authorization": f"Bearer {capped.auth.admin_token}"}
    with httpx.Client(base_url=capped.url, headers=auth, timeout=30) as client:
        response = client.post("/store/spans", json=store_spans(rollout_id, 10))
    assert response.status_code == 204 and len(agent_spans(capped, rollout_id)) == 10


def test_a_restarted_server_counts_what_the_store_already_holds(
    capped: GatewayRig, tmp_path: Path, upstream_url: str
) -> None:
    rollout_id, _, key = capped.session()
    auth = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=capped.url, headers=auth, timeout=30) as client:
        assert client.post("/store/spans", json=store_spans(rollout_id, 5)).status_code == 204
    fresh = Gateway(capped.store, capped.auth, GatewayConfig.for_agents(QUOTA))
    with serve_app(create_app(fresh)) as url, httpx.Client(base_url=url, headers=auth, timeout=30) as client:
        over = client.post("/store/spans", json=store_spans(rollout_id, 2, start=5))
        fits = client.post("/store/spans", json=store_spans(rollout_id, 1, start=5))
    assert refusal(over)[:2] == (429, "span_quota_exceeded") and fits.status_code == 204
