"""A full disk or a read-only store under a live gateway: a clear 503, no corruption, nothing lost.

The disk filling up is simulated with SQLite's `max_page_count` (the database may not grow any more),
a read-only store with `query_only`; both on the gateway's own connection to a real file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

import httpx
import openai
import pytest

from tests.rigs import GatewayRig

MESSAGES = [{"role": "user", "content": "before the fault"}]


def fill_disk(rig: GatewayRig) -> Callable[[], None]:
    db = rig.store.dialect.db
    with rig.store.dialect._lock:  # no other write of the store between reading the size and capping it
        (pages,) = db.execute("PRAGMA page_count").fetchone()
        (previous,) = db.execute("PRAGMA max_page_count").fetchone()
        db.execute(f"PRAGMA max_page_count = {pages}")
    return lambda: db.execute(f"PRAGMA max_page_count = {previous}")


def make_read_only(rig: GatewayRig) -> Callable[[], None]:
    rig.store.dialect.db.execute("PRAGMA query_only = ON")
    return lambda: rig.store.dialect.db.execute("PRAGMA query_only = OFF")


FAULTS = {"disk_full": (fill_disk, "full"), "read_only": (make_read_only, "readonly")}


# Big enough that a row needs new pages, whatever free space the file has left.
BIG = "x" * 20_000


def big_messages(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"during the fault {i} {BIG}"}]


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_gateway_answers_503_and_keeps_what_it_answered(rig: GatewayRig, fault: str) -> None:
    inject, needle = FAULTS[fault]
    rollout_id, base_url, key = rig.session()
    llm = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    for _ in range(3):
        llm.chat.completions.create(model="policy", messages=MESSAGES)
    heal = inject(rig)

    for i in range(3):
        with pytest.raises(openai.APIStatusError) as raised:
            llm.chat.completions.create(model="policy", messages=big_messages(i))
        assert raised.value.status_code == 503
        error = raised.value.body
        assert error["code"] == "store_unavailable" and error["type"] == "server_error"
        assert "could not be recorded" in error["message"] and needle in error["message"]
    with pytest.raises(openai.APIError, match=needle):
        for _ in llm.chat.completions.create(model="policy", messages=big_messages(9), stream=True):
            pass

    auth = {"Authorization": f"Bearer {key}"}
    reward = httpx.post(f"{rig.url}/rollouts/{rollout_id}", json={"value": 1.0, "name": BIG}, headers=auth)
    assert reward.status_code == 503 and needle in reward.json()["error"]["message"]
    admin = {"Authorization": f"Bearer {rig.auth.admin_token}"}
    session = httpx.post(f"{rig.url}/admin/sessions", json={"input": {"blob": BIG}}, headers=admin)
    assert session.status_code == 503 and session.json()["error"]["code"] == "store_unavailable"

    # Reads still work during the fault: every answered call is there, nothing else.
    spans = httpx.get(f"{rig.url}/store/spans", params={"rollout_id": rollout_id}, headers=admin)
    assert spans.status_code == 200
    assert [s["attributes"]["request"]["messages"] for s in spans.json()] == [MESSAGES] * 3

    heal()
    llm.chat.completions.create(model="policy", messages=[{"role": "user", "content": "after"}])
    assert len(rig.store.query_spans(rollout_id=rollout_id)) == 4
    with sqlite3.connect(rig.store.path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
