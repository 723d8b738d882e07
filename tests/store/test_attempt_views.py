"""What an attempt's token reads of its rollout through the store API is that attempt's own: the task
without its reference, and nothing an earlier attempt left (its output, its error, when it ended). The
earlier attempts' errors stay in the store, the operator's: the admin token reads them on the rollout and
its attempts. The same on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import serve_app
from tether.store.auth import TokenAuthority
from tether.store.base import Store
from tether.store.records import RolloutRequest, RolloutStatus, Task
from tether.store.server import create_store_app
from tether.store.sqlite import SQLiteStore

ANSWER = "7006652"
FAILED_WITH = f"evaluator failed: AssertionError: expected {ANSWER}, got '0'"
LOST_WITH = f"heartbeat lost after the agent printed {ANSWER}"


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        opened: Store = SQLiteStore(tmp_path / "store.db")
    else:
        from tether.store.postgres import PostgresStore

        opened = PostgresStore(request.getfixturevalue("pg_url"))
    yield opened
    opened.close()


def third_attempt(store: Store) -> str:
    """A rollout whose attempt 1 failed (its evaluator quoting the answer) and whose attempt 2 was lost
    (the reason quoting it too), now running attempt 3."""
    task = Task(input={"question": "the code?", "reference": {"answer": ANSWER}})
    (rollout,) = store.enqueue([RolloutRequest(task=task, max_attempts=2)])
    assert store.claim("w") is not None
    store.update_status(rollout.id, RolloutStatus.failed, output=f"0 {ANSWER}", error=FAILED_WITH, attempt=1)
    assert store.claim("w") is not None
    store.abandon(rollout.id, 2, LOST_WITH)
    claim = store.claim("w")
    assert claim is not None and claim.attempt.number == 3
    return rollout.id


def read(url: str, path: str, token: str) -> Any:
    response = httpx.get(url + path, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def test_an_attempts_token_reads_nothing_of_the_attempts_before_it(store: Store) -> None:
    rollout_id = third_attempt(store)
    auth = TokenAuthority.generate()
    with serve_app(create_store_app(store, auth)) as url:
        seen = read(url, f"/store/rollouts/{rollout_id}", auth.rollout_token(rollout_id, 3))
        as_admin = read(url, f"/store/rollouts/{rollout_id}", auth.admin_token)
        attempts = read(url, f"/store/rollouts/{rollout_id}/attempts", auth.admin_token)

    assert ANSWER not in str(seen)
    assert seen["input"] == {"question": "the code?"}
    assert (seen["status"], seen["attempt_count"], seen["worker_losses"]) == ("running", 3, 1)
    assert (seen["output"], seen["error"], seen["ended_at"]) == (None, None, None)
    # the operator's: the rollout says why its last attempt ended, each attempt why it did
    assert as_admin["error"] == LOST_WITH and as_admin["input"]["reference"] == {"answer": ANSWER}
    assert [(a["number"], a["error"]) for a in attempts] == [(1, FAILED_WITH), (2, LOST_WITH), (3, None)]
    assert {key: value for key, value in seen.items() if key not in ("input",)} == {
        key: (None if key in ("output", "error", "ended_at") else value)
        for key, value in as_admin.items()
        if key != "input"
    }
