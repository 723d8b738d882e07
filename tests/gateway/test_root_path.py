"""The gateway served under a root path: behind a proxy that strips a prefix (uvicorn's `root_path`),
or mounted inside another ASGI app. Model calls (served in front of FastAPI's router) and the other
routes answer there as they do at the top."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from tests.gateway.fake_upstream import WORDS, Behaviour
from tests.helpers import serve_app
from tether.compose import create_app
from tether.gateway import Gateway, HTTPUpstream, HTTPUpstreamConfig
from tether.store import SQLiteStore
from tether.store.auth import TokenAuthority

PREFIX = "/tether"


@pytest.fixture
def gateway(tmp_path: Path, upstream_url: str) -> Iterator[Gateway]:
    store = SQLiteStore(tmp_path / "store.db")
    gateway = Gateway(store, TokenAuthority.generate())
    gateway.add_upstream(HTTPUpstream(HTTPUpstreamConfig("policy", upstream_url, request_token_ids=True)))
    yield gateway
    store.close()


def call_and_check(gateway: Gateway, base: str) -> None:
    rollout_id = gateway.store.start_session({"q": 1}).rollout.id
    key = gateway.auth.rollout_token(rollout_id, 1)
    llm = openai.OpenAI(base_url=f"{base}/rollouts/{rollout_id}/v1", api_key=key, max_retries=0)
    reply = llm.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "".join(WORDS)
    [span] = gateway.store.query_spans(rollout_id=rollout_id)
    assert span.attributes["prompt_token_ids"]
    models = httpx.get(f"{base}/rollouts/{rollout_id}/v1/models", headers={"Authorization": f"Bearer {key}"})
    assert models.status_code == 200 and models.json()["data"]
    assert httpx.get(f"{base}/healthz").json()["ok"] is True


def test_behind_a_proxy_that_strips_the_prefix(gateway: Gateway, behaviour: Behaviour) -> None:
    with serve_app(create_app(gateway), root_path=PREFIX) as url:
        call_and_check(gateway, url)
        paths = httpx.get(f"{url}/openapi.json").json()["paths"]
        assert "/rollouts/{rollout_id}/v1/chat/completions" in paths


def test_mounted_in_another_app(gateway: Gateway, behaviour: Behaviour) -> None:
    outer = Starlette(routes=[Mount(PREFIX, app=create_app(gateway))])
    with serve_app(outer) as url:
        call_and_check(gateway, url + PREFIX)
        assert httpx.post(f"{url}/rollouts/ro-x/v1/chat/completions", json={}).status_code == 404
