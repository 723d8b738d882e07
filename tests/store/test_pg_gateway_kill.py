"""`kill -9` of `tether serve` on a PostgreSQL store, then a restart: no answered call is lost, and the
rollouts that were running are recovered (the SQLite version is tests/faults/test_server_kill.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.test_server_kill import (
    admin_client,
    agent_for,
    ask,
    claim_running,
    kill_during_calls,
    post_reward,
    wait_until_not_running,
)
from tests.gateway.fake_upstream import Behaviour, create_fake_upstream
from tests.helpers import serve_app
from tests.pg import Cluster
from tests.serve_process import serve_process
from tether.store.postgres import PostgresStore


@pytest.fixture
def upstream() -> Iterator[str]:
    with serve_app(create_fake_upstream(Behaviour())) as url:
        yield url + "/v1"


def recorded_contents(url: str, rollout_id: str) -> list[str]:
    store = PostgresStore(url, pool_size=1)
    try:
        spans = store.query_spans(rollout_id=rollout_id, limit=1_000_000)
        return [s.attributes["request"]["messages"][0]["content"] for s in spans]
    finally:
        store.close()


def test_kill_9_mid_run_loses_no_answered_call(tmp_path: Path, upstream: str, pg_cluster: Cluster) -> None:
    url = pg_cluster.create_database()
    answered: list[str] = []
    serve = ("--store", url, "--upstream", upstream, "--upstream-token-ids")
    with serve_process(tmp_path, *serve) as served:
        admin = admin_client(served)
        running = claim_running(admin, max_attempts=1)["rollout"]["id"]
        session = served.base_url.split("/rollouts/")[1].split("/")[0]
        llm = agent_for(served, admin, running, 1)
        for i in range(3):
            ask(llm, f"{running} call {i}")
        post_reward(served, llm, running, 0.5)
        admin.close()
        kill_during_calls(served, answered, calls=40)

    assert len(answered) >= 40
    recorded = recorded_contents(url, session)
    assert set(answered) <= set(recorded) and len(recorded) == len(set(recorded))
    assert not (tmp_path / ".tether" / "store.db").exists()  # everything went to PostgreSQL

    restart = ("--store", url, "--upstream", upstream, "--no-session", "--heartbeat-timeout", "1")
    with serve_process(tmp_path, *restart) as served:
        admin = admin_client(served)
        requeued = wait_until_not_running(admin, running)
        assert (requeued["status"], requeued["error"], requeued["worker_losses"]) == (
            "queued",
            "heartbeat lost",
            1,
        )
        assert admin.get(f"/store/rollouts/{session}").json()["status"] == "running"
        rewards = admin.get(f"/store/rollouts/{running}/rewards").json()
        assert [(r["value"], r["source"]) for r in rewards] == [(0.5, "agent")]
        ask(agent_for(served, admin, session, 1), "session after restart")
        admin.close()
    assert recorded_contents(url, running) == [f"{running} call {i}" for i in range(3)]
    assert recorded_contents(url, session)[-1] == "session after restart"
