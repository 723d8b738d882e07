"""The gateway never reads the store on its event loop: model calls, reward events and the admin routes
read rollouts on worker threads, and a call whose rollout has not changed since it was last read does
not read it again. A change to any rollout makes the next call read its rollout afresh."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.helpers import serve_app
from tether.compose import create_app
from tether.gateway import Gateway, HTTPUpstream, HTTPUpstreamConfig
from tether.store import Claim, Rollout, RolloutStatus, SQLiteStore
from tether.store.auth import TokenAuthority

CHAT = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}


class ReadLog(SQLiteStore):
    """A real in-memory store that notes the thread of each rollout read and session start."""

    def __init__(self) -> None:
        super().__init__(":memory:")
        self.reads: list[str] = []

    def get_rollout(self, rollout_id: str) -> Rollout:
        self.reads.append(threading.current_thread().name)
        return super().get_rollout(rollout_id)

    def start_session(self, *args: Any, **kwargs: Any) -> Claim:
        self.reads.append(threading.current_thread().name)
        return super().start_session(*args, **kwargs)


@pytest.fixture
def served(upstream_url: str) -> Iterator[tuple[str, Gateway, ReadLog]]:
    store = ReadLog()
    auth = TokenAuthority.generate()
    gateway = Gateway(store, auth)
    gateway.add_upstream(HTTPUpstream(HTTPUpstreamConfig("policy", upstream_url)))
    with serve_app(create_app(gateway)) as url:
        gateway.config.public_url = url
        yield url, gateway, store
    store.close()


def test_rollout_reads_are_off_the_loop_and_cached(served: tuple[str, Gateway, ReadLog]) -> None:
    url, gateway, store = served
    admin = {"Authorization": f"Bearer {gateway.auth.admin_token}"}
    creds = httpx.post(f"{url}/admin/sessions", json={"input": {"q": 1}}, headers=admin).json()
    rollout_id, base_url = creds["rollout_id"], creds["base_url"]
    agent = {"Authorization": f"Bearer {creds['api_key']}"}
    credentials = httpx.get(f"{url}/admin/rollouts/{rollout_id}/credentials", headers=admin)
    assert credentials.json()["api_key"] == creds["api_key"]
    for _ in range(3):
        assert httpx.post(f"{base_url}/chat/completions", json=CHAT, headers=agent).status_code == 200
    reward = httpx.post(f"{url}/rollouts/{rollout_id}/rewards", json={"value": 1}, headers=agent)
    assert reward.status_code == 200
    # One session start, one rollout read: the other calls found the rollout unchanged.
    assert len(store.reads) == 2
    assert "serve_app" not in store.reads  # the server's event loop thread

    other = store.start_session({"q": 2}).rollout.id
    store.update_status(other, RolloutStatus.succeeded)  # a change to some rollout: reread
    assert httpx.post(f"{base_url}/chat/completions", json=CHAT, headers=agent).status_code == 200
    assert len(store.reads) == 4 and store.reads.count("serve_app") == 0

    store.update_status(rollout_id, RolloutStatus.succeeded)
    expired = httpx.post(f"{base_url}/chat/completions", json=CHAT, headers=agent)
    assert expired.status_code == 401 and "expired" in expired.json()["error"]["message"]
    assert len(gateway.store.query_spans(rollout_id=rollout_id)) == 4
