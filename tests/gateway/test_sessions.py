"""Named sessions and the rewards that come later: a deployment opens a session by name with the deploy
key, its calls are recorded under it, it closes when ended or idle, and outcomes posted later with the
reward key are recorded with who sent them and when. A real SQLite file, a real gateway on loopback, the
scripted upstream."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import serve_app
from tether.compose import create_app
from tether.contracts import is_call_span
from tether.gateway import Gateway, HTTPUpstream, HTTPUpstreamConfig
from tether.gateway.sessions import SESSIONS_RUN, SessionBook, SessionRules
from tether.store import RolloutStatus, SQLiteStore
from tether.store.auth import TokenAuthority

CHAT = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}


class Served:
    def __init__(self, url: str, gateway: Gateway, book: SessionBook) -> None:
        self.url, self.gateway, self.book = url, gateway, book
        auth = gateway.auth
        self.deploy = {"Authorization": f"Bearer {auth.deploy_token}"}
        self.reward = {"Authorization": f"Bearer {auth.reward_token}"}

    def open(self, name: str, **body: Any) -> httpx.Response:
        return httpx.post(f"{self.url}/sessions/open", json={"session": name, **body}, headers=self.deploy)

    def chat(self, creds: dict[str, str]) -> httpx.Response:
        headers = {"Authorization": f"Bearer {creds['api_key']}"}
        return httpx.post(f"{creds['base_url']}/chat/completions", json=CHAT, headers=headers)

    def post_reward(
        self, name: str, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> httpx.Response:
        return httpx.post(
            f"{self.url}/sessions/{name}/rewards",
            json=body,
            headers=self.reward if headers is None else headers,
        )


@pytest.fixture
def served(upstream_url: str, tmp_path: Path) -> Iterator[Served]:
    store = SQLiteStore(tmp_path / "store.db")
    gateway = Gateway(store, TokenAuthority.generate())
    gateway.add_upstream(HTTPUpstream(HTTPUpstreamConfig("policy", upstream_url)))
    book = SessionBook(gateway, SessionRules(idle_s=0.5, max_rewards=3))
    with serve_app(create_app(gateway, sessions=book)) as url:
        gateway.config.public_url = url
        yield Served(url, gateway, book)
    store.close()


def test_a_named_session_records_its_calls_and_opens_once(served: Served) -> None:
    first = served.open("user-42.chat-7", input={"user": "42"})
    assert first.status_code == 200, first.text
    creds = first.json()
    assert served.chat(creds).status_code == 200
    again = served.open("user-42.chat-7").json()  # a stateless front end asks on every turn
    assert (again["rollout_id"], again["api_key"]) == (creds["rollout_id"], creds["api_key"])
    assert served.chat(again).status_code == 200
    store = served.gateway.store
    rollout = store.get_rollout(creds["rollout_id"])
    assert (rollout.run, rollout.status, rollout.input) == (
        SESSIONS_RUN,
        RolloutStatus.running,
        {"user": "42"},
    )
    calls = [s for s in store.query_spans(rollout_id=rollout.id) if is_call_span(s.name)]
    assert len(calls) == 2
    other = served.open("user-43.chat-1").json()
    assert other["rollout_id"] != creds["rollout_id"]


def test_an_ended_session_closes_its_key_and_its_name(served: Served) -> None:
    creds = served.open("s1").json()
    ended = httpx.post(f"{served.url}/sessions/s1/end", headers=served.deploy)
    assert ended.json()["status"] == "succeeded"
    assert served.chat(creds).status_code == 401  # its key died with it
    reopened = served.open("s1")
    assert reopened.status_code == 409 and "new name" in reopened.json()["error"]["message"]
    assert httpx.post(f"{served.url}/sessions/nobody/end", headers=served.deploy).status_code == 404


def test_an_idle_session_closes_and_a_busy_one_stays_open(served: Served) -> None:
    idle, busy = served.open("idle").json(), served.open("busy").json()
    deadline = time.time() + 0.8
    while time.time() < deadline:  # the busy one calls more often than idle_s
        assert served.chat(busy).status_code == 200
        time.sleep(0.1)
    assert served.book.sweep() == ["idle"]
    store = served.gateway.store
    assert store.get_rollout(idle["rollout_id"]).status == RolloutStatus.succeeded
    assert store.get_rollout(busy["rollout_id"]).status == RolloutStatus.running
    assert served.chat(idle).status_code == 401


def test_rewards_come_later_with_who_sent_them_and_when(served: Served) -> None:
    creds = served.open("s2").json()
    assert served.chat(creds).status_code == 200
    httpx.post(f"{served.url}/sessions/s2/end", headers=served.deploy)
    call = next(
        s for s in served.gateway.store.query_spans(rollout_id=creds["rollout_id"]) if is_call_span(s.name)
    )
    before = time.time()
    up = served.post_reward("s2", {"thumbs": "up", "by": "web-ui"})  # after the session closed
    assert up.status_code == 200, up.text
    one_call = served.post_reward("s2", {"value": 0.25, "name": "ticket_closed", "span_id": call.span_id})
    assert one_call.status_code == 200, one_call.text
    rewards = served.gateway.store.query_rewards(creds["rollout_id"])
    assert [(r.name, r.value, r.source, r.span_id) for r in rewards] == [
        ("feedback", 1.0, "later:web-ui", None),
        ("ticket_closed", 0.25, "later:reward-key", call.span_id),
    ]
    assert all(before <= r.time <= time.time() for r in rewards)


def test_bad_rewards_and_wrong_keys_are_refused_and_lose_nothing(served: Served) -> None:
    creds = served.open("s3").json()
    agent = {"Authorization": f"Bearer {creds['api_key']}"}
    refused = [
        (served.post_reward("nobody", {"value": 1}), 404),
        (served.post_reward("s3", {"value": "high"}), 400),
        (served.post_reward("s3", {"thumbs": "sideways"}), 400),
        (served.post_reward("s3", {"thumbs": "up", "value": 1}), 400),
        (served.post_reward("s3", {"value": 1, "by": ""}), 400),
        (served.post_reward("bad name!", {"value": 1}), 400),
        (served.post_reward("s3", {"value": 1}, headers=agent), 403),  # an agent's key
        (served.post_reward("s3", {"value": 1}, headers=served.deploy), 403),
        (served.post_reward("s3", {"value": 1}, headers={}), 401),
        (served.chat({"base_url": creds["base_url"], "api_key": served.gateway.auth.reward_token}), 403),
        (httpx.post(f"{served.url}/sessions/open", json={"session": "s4"}, headers=served.reward), 403),
        (served.open("no spaces"), 400),
    ]
    assert [(r.status_code, expected) for r, expected in refused] == [(e, e) for _, e in refused]
    assert "deploy and reward keys" in refused[9][0].json()["error"]["message"]
    assert served.gateway.store.query_rewards(creds["rollout_id"]) == []
    for value in (1, 0, 1):  # the cap is 3: a flood gets 429 and keeps what came before it
        assert served.post_reward("s3", {"value": value}).status_code == 200
    flood = served.post_reward("s3", {"value": 1})
    assert flood.status_code == 429 and "--max-session-rewards" in flood.json()["error"]["message"]
    assert [r.value for r in served.gateway.store.query_rewards(creds["rollout_id"])] == [1.0, 0.0, 1.0]
