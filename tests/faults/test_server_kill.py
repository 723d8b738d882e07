"""`kill -9` of `tether serve` mid-run, then a restart on the same project: nothing answered is lost and
the rollouts that were running are recovered (requeued: a lost worker does not use up an attempt)."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.gateway.fake_upstream import Behaviour, create_fake_upstream
from tests.helpers import serve_app
from tests.serve_process import ServeProcess, serve_process
from tether.store import SQLiteStore

RECOVERY_DEADLINE_S = 20.0


@pytest.fixture
def upstream() -> Iterator[str]:
    with serve_app(create_fake_upstream(Behaviour())) as url:
        yield url + "/v1"


def admin_client(served: ServeProcess) -> httpx.Client:
    return httpx.Client(
        base_url=served.url, headers={"Authorization": f"Bearer {served.admin_token}"}, timeout=30
    )


def claim_running(admin: httpx.Client, max_attempts: int) -> dict[str, Any]:
    response = admin.post(
        "/store/rollouts", json={"requests": [{"task": {"input": {"q": "x"}}, "max_attempts": max_attempts}]}
    )
    assert response.status_code == 200, response.text
    claim = admin.post("/store/rollouts/claim", json={"worker_id": "doomed-runner"}).json()
    assert claim["rollout"]["id"] == response.json()[0]["id"]
    return claim


def agent_for(served: ServeProcess, admin: httpx.Client, rollout_id: str, attempt: int) -> openai.OpenAI:
    key = admin.get(f"/admin/rollouts/{rollout_id}/credentials").json()["api_key"]
    base = f"{served.url}/rollouts/{rollout_id}/attempts/{attempt}/v1"
    return openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=30)


def ask(llm: openai.OpenAI, content: str) -> None:
    llm.chat.completions.create(model="policy", messages=[{"role": "user", "content": content}])


def post_reward(served: ServeProcess, llm: openai.OpenAI, rollout_id: str, value: float) -> None:
    response = httpx.post(
        f"{served.url}/rollouts/{rollout_id}",
        json={"value": value},
        headers={"Authorization": f"Bearer {llm.api_key}"},
    )
    assert response.status_code == 200, response.text


@contextmanager
def heartbeating(served: ServeProcess, rollout_id: str, attempt: int) -> Iterator[None]:
    """Heartbeat an attempt from a thread, as a live runner does."""
    stop = threading.Event()

    def beat() -> None:
        with admin_client(served) as admin:
            while not stop.wait(0.1):
                admin.post(f"/store/rollouts/{rollout_id}/heartbeat", json={"attempt": attempt})

    thread = threading.Thread(target=beat)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)


def wait_until_not_running(admin: httpx.Client, rollout_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + RECOVERY_DEADLINE_S
    while True:
        rollout = admin.get(f"/store/rollouts/{rollout_id}").json()
        if rollout["status"] != "running" or time.monotonic() > deadline:
            return rollout
        time.sleep(0.1)


def recorded_contents(db: Path, rollout_id: str) -> list[str]:
    store = SQLiteStore(db)
    try:
        spans = store.query_spans(rollout_id=rollout_id, limit=1_000_000)
        return [s.attributes["request"]["messages"][0]["content"] for s in spans]
    finally:
        store.close()


def hammer(served: ServeProcess, answered: list[str], stop: threading.Event, worker: int) -> None:
    """An agent making calls on the session until told to stop or the server dies under it."""
    llm = openai.OpenAI(base_url=served.base_url, api_key=served.api_key, max_retries=0, timeout=10)
    for i in range(100_000):
        if stop.is_set():
            return
        content = f"worker {worker} call {i}"
        try:
            ask(llm, content)
        except openai.APIError:
            return  # the server died under this call: it was never answered
        answered.append(content)


def kill_during_calls(served: ServeProcess, answered: list[str], calls: int) -> None:
    stop = threading.Event()
    threads = [threading.Thread(target=hammer, args=(served, answered, stop, w)) for w in range(4)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 20
    while len(answered) < calls and time.monotonic() < deadline:
        time.sleep(0.01)
    served.kill9()
    stop.set()
    for thread in threads:
        thread.join(30)


def test_kill_9_mid_run_then_restart(tmp_path: Path, upstream: str) -> None:
    answered: list[str] = []
    with serve_process(tmp_path, "--upstream", upstream, "--upstream-token-ids") as served:
        admin = admin_client(served)
        retryable = claim_running(admin, max_attempts=2)["rollout"]["id"]
        last_try = claim_running(admin, max_attempts=1)["rollout"]["id"]
        session = served.base_url.split("/rollouts/")[1].split("/")[0]
        dead_key = admin.get(f"/admin/rollouts/{retryable}/credentials").json()["api_key"]
        for rollout_id in (retryable, last_try):
            llm = agent_for(served, admin, rollout_id, 1)
            for i in range(3):
                ask(llm, f"{rollout_id} call {i}")
            post_reward(served, llm, rollout_id, 0.5)
        admin.close()
        kill_during_calls(served, answered, calls=40)

    assert len(answered) >= 40
    db = tmp_path / ".tether" / "store.db"
    assert sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone() == ("ok",)
    recorded = recorded_contents(db, session)
    assert set(answered) <= set(recorded) and len(recorded) == len(set(recorded))

    restart = ("--upstream", upstream, "--no-session", "--heartbeat-timeout", "1")
    with serve_process(tmp_path, *restart) as served:
        admin = admin_client(served)
        requeued = wait_until_not_running(admin, retryable)
        assert requeued["status"] == "queued" and requeued["error"] == "heartbeat lost"
        # A lost worker is not the agent's failure: even a rollout's only attempt is given back.
        only_try = wait_until_not_running(admin, last_try)
        assert only_try["status"] == "queued" and only_try["error"] == "heartbeat lost"
        assert only_try["worker_losses"] == 1 and requeued["worker_losses"] == 1
        attempts = admin.get(f"/store/rollouts/{retryable}/attempts").json()
        assert [(a["status"], a["error"]) for a in attempts] == [("timed_out", "heartbeat lost")]
        # A session has no runner to heartbeat it: it stays open, and its key keeps working.
        assert admin.get(f"/store/rollouts/{session}").json()["status"] == "running"

        for rollout_id in (retryable, last_try):
            assert recorded_contents(db, rollout_id) == [f"{rollout_id} call {i}" for i in range(3)]
            rewards = admin.get(f"/store/rollouts/{rollout_id}/rewards").json()
            assert [(r["value"], r["source"]) for r in rewards] == [(0.5, "agent")]

        # The requeued rollout runs again as attempt 2 with a token of its own; the dead attempt's token is
        # refused, and attempt 2's token does not open the dead attempt's URL.
        claim = admin.post("/store/rollouts/claim", json={"worker_id": "new-runner"}).json()
        assert (claim["rollout"]["id"], claim["attempt"]["number"]) == (retryable, 2)
        with heartbeating(served, retryable, 2):
            ask(agent_for(served, admin, retryable, 2), "second attempt")
            dead = openai.OpenAI(
                base_url=served.url + f"/rollouts/{retryable}/attempts/1/v1", api_key=dead_key
            )
            with pytest.raises(openai.AuthenticationError, match="attempt 1 .* is over"):
                ask(dead.with_options(max_retries=0, timeout=30), "from the dead attempt")
            with pytest.raises(openai.PermissionDeniedError, match="attempt 2 .*, not attempt 1"):
                ask(agent_for(served, admin, retryable, 1), "from the dead attempt's URL")
            # A heartbeating attempt is left alone by the recovery sweep.
            assert admin.get(f"/store/rollouts/{retryable}").json()["status"] == "running"
        ask(agent_for(served, admin, session, 1), "session after restart")
        admin.close()
    assert recorded_contents(db, retryable)[-1] == "second attempt"
    assert recorded_contents(db, session)[-1] == "session after restart"
