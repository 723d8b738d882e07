"""The store API bounds what any token may send: body size and JSON nesting, with clear errors, and the
store is untouched by a refused body."""

from __future__ import annotations

import httpx

from tests.rigs import GatewayRig
from tether.limits import MAX_BODY_BYTES, MAX_JSON_DEPTH


def span_body(rollout_id: str, value: str) -> str:
    span = f'{{"rollout_id":"{rollout_id}","name":"n","start_time":1,"attributes":{{"a":{value}}}}}'
    return f'{{"spans":[{span}]}}'


def test_an_oversize_span_is_refused_before_it_is_read_whole(rig: GatewayRig) -> None:
    rollout_id, _, key = rig.session()
    filler = "x" * (MAX_BODY_BYTES + 1024)
    body = span_body(rollout_id, f'"{filler}"')
    response = httpx.post(
        f"{rig.url}/store/spans",
        content=body.encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    assert response.status_code == 413 and response.json()["error"]["code"] == "request_too_large"
    assert rig.store.query_spans(rollout_id=rollout_id) == []


def test_a_deeply_nested_body_is_refused_and_a_shallow_one_is_kept(rig: GatewayRig) -> None:
    rollout_id, _, key = rig.session()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def post(depth: int) -> httpx.Response:
        nested = "[" * depth + "]" * depth
        body = span_body(rollout_id, nested)
        return httpx.post(f"{rig.url}/store/spans", content=body.encode(), headers=headers)

    refused = post(1000)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "too_deep"
    assert post(MAX_JSON_DEPTH - 8).status_code == 204
    assert len(rig.store.query_spans(rollout_id=rollout_id)) == 1
