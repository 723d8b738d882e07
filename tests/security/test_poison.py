"""A poison request cannot hurt other rollouts' calls: a body nested too deep is refused before the model
runs, on every route that takes JSON, and a call whose span the store cannot keep fails alone, not with
the other calls of the commit it shared."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.gateway.fake_upstream import nested
from tests.rigs import GatewayRig
from tether.gateway.recorder import SpanRecorder
from tether.gateway.request_checks import nests_deeper
from tether.limits import MAX_JSON_DEPTH, json_depth
from tether.store import SQLiteStore
from tether.store.base import InvalidValue
from tether.store.records import Span

CHAT = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}
ROUTE_BODIES = {
    "chat/completions": CHAT,
    "completions": {"model": "policy", "prompt": "hi"},
    "responses": {"model": "policy", "input": "hi"},
    "messages": {**CHAT, "max_tokens": 16},
}
DEEP = '{"model": "policy", "x": ' + "[" * 1000 + "]" * 1000 + "}"


def message_of(response: httpx.Response) -> str:
    return str(response.json()["error"]["message"])


@pytest.mark.parametrize("route", sorted(ROUTE_BODIES))
def test_a_deep_body_is_refused_before_the_model_runs(rig: GatewayRig, route: str) -> None:
    rollout_id, base_url, key = rig.session()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    response = httpx.post(f"{base_url}/{route}", content=DEEP.encode(), headers=headers)
    assert response.status_code == 400, response.text
    assert f"deeper than {MAX_JSON_DEPTH} levels" in message_of(response)
    assert rig.behaviour.requests == [] and rig.store.query_spans(rollout_id=rollout_id) == []


@pytest.mark.parametrize("suffix", ["", "/rewards"])
def test_a_deep_reward_event_is_refused(rig: GatewayRig, suffix: str) -> None:
    rollout_id, base_url, key = rig.session()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    body = '{"value": 1, "x": ' + '{"a": ' * 300 + "1" + "}" * 300 + "}"
    url = base_url.removesuffix("/v1") + suffix
    response = httpx.post(url, content=body.encode(), headers=headers)
    assert response.status_code == 400 and response.json()["error"]["code"] == "too_deep"
    assert rig.store.query_rewards(rollout_id) == []


def test_the_deepest_body_allowed_is_answered_and_recorded(rig: GatewayRig) -> None:
    rollout_id, base_url, key = rig.session()
    body = {**CHAT, "x": nested(MAX_JSON_DEPTH - 1)}  # the object around it is the last level
    response = httpx.post(
        f"{base_url}/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
    )
    assert response.status_code == 200, response.text
    [span] = rig.store.query_spans(rollout_id=rollout_id)
    assert span.attributes["request"]["x"] == nested(MAX_JSON_DEPTH - 1)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(JSON, st.integers(min_value=0, max_value=8))
def test_the_gateways_depth_check_counts_as_the_shared_limit_does(value: object, limit: int) -> None:
    assert nests_deeper(value, limit) == (json_depth(value, limit) > limit)


async def traffic(rig: GatewayRig, calls: int) -> tuple[list[httpx.Response], list[httpx.Response]]:
    """`calls` legitimate calls from one rollout, at once with two poison calls from another: a body too
    deep, and a body that asks for an answer too deep for the store (the model has run by then)."""
    _, victim_url, victim_key = rig.session()
    _, poison_url, poison_key = rig.session()

    async def post(client: httpx.AsyncClient, url: str, key: str, body: bytes) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        return await client.post(f"{url}/chat/completions", content=body, headers=headers)

    legit = httpx.Request("POST", "/", json=CHAT).content
    unrecordable = httpx.Request("POST", "/", json={**CHAT, "fake_nesting": 400}).content
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=calls + 2)) as client:
        half = [post(client, victim_url, victim_key, legit) for _ in range(calls // 2)]
        poison = [
            post(client, poison_url, poison_key, DEEP.encode()),
            post(client, poison_url, poison_key, unrecordable),
        ]
        rest = [post(client, victim_url, victim_key, legit) for _ in range(calls - calls // 2)]
        answers = await asyncio.gather(*half, *poison, *rest)
    cut = calls // 2
    return [*answers[:cut], *answers[cut + 2 :]], list(answers[cut : cut + 2])


def test_poison_beside_another_rollouts_traffic_hurts_only_itself(rig: GatewayRig) -> None:
    calls = 24
    legit, (deep, unrecordable) = asyncio.run(traffic(rig, calls))
    assert [answer.status_code for answer in legit] == [200] * calls
    assert deep.status_code == 400 and deep.json()["error"]["code"] == "too_deep"
    assert unrecordable.status_code == 400, unrecordable.text
    assert unrecordable.json()["error"]["code"] == "unrecordable"
    assert "could not be recorded" in message_of(unrecordable)
    spans = rig.store.query_spans()
    victims = {span.rollout_id for span in spans}
    assert len(spans) == calls and len(victims) == 1  # every legitimate call, nothing of the poison's


def span(rollout_id: str, index: int, attributes: dict[str, object]) -> Span:
    return Span(rollout_id=rollout_id, name="llm.chat", start_time=float(index), attributes=attributes)


def test_an_unstorable_span_fails_only_its_own_call_in_a_shared_commit(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    recorder = SpanRecorder(store)
    good = [span(f"ro-{i}", i, {"ok": i}) for i in range(8)]
    bad = Span.model_construct(**span("ro-poison", 99, {}).model_dump() | {"attributes": {"x": nested(400)}})

    async def record_together() -> list[BaseException | None]:
        # Handed over in one loop iteration, so they make one commit group.
        return await asyncio.gather(
            *(recorder.record(s) for s in [*good[:4], bad, *good[4:]]), return_exceptions=True
        )

    outcomes = asyncio.run(record_together())
    recorder.close()
    assert [outcome is None for outcome in outcomes] == [True] * 4 + [False] + [True] * 4
    assert isinstance(outcomes[4], InvalidValue)
    assert sorted(s.rollout_id for s in store.query_spans()) == sorted(s.rollout_id for s in good)
    assert recorder.recorded == len(good)
    store.close()
