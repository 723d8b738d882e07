"""`Store.query_rollouts`: SQLite's one-statement answer, the HTTP client's, and the generic scan agree,
on rollouts made through the real store lifecycle (claims, attempts, retries, rewards, spans)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import serve_app
from tether.contracts import CallAttr, Origin
from tether.store import SQLiteStore
from tether.store.auth import TokenAuthority
from tether.store.client import StoreClient
from tether.store.records import Reward, RolloutQuery, RolloutRequest, RolloutStatus, Span, Task
from tether.store.reward_rule import rollout_reward
from tether.store.rollout_query import query_rollouts_by_scanning
from tether.store.server import create_store_app


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "store.db")
    requests = [
        RolloutRequest(
            task=Task(id=f"task-{i % 7}", input={"q": f"what is {i}?"}),
            run="a" if i % 3 else "b",
            key=str(i),
            max_attempts=2,
            group_id=f"g{i % 4}",
            metadata={"agent_rewards": i % 5 != 0},
        )
        for i in range(60)
    ]
    store.enqueue(requests)
    for i in range(45):
        claim = store.claim(f"node{i % 2}/pid/worker-{i % 3}")
        assert claim is not None
        rollout, attempt = claim.rollout.id, claim.attempt.number
        store.add_spans(
            [
                Span(
                    rollout_id=rollout,
                    attempt=attempt,
                    name="llm.chat",
                    start_time=0.0,
                    origin=Origin.GATEWAY,
                    attributes={CallAttr.AGENT: "writer" if i % 2 else "checker"},
                )
            ]
        )
        rewards = [Reward(rollout_id=rollout, value=i / 45, source="evaluator", attempt=attempt)]
        rewards.append(Reward(rollout_id=rollout, value=0.99, source="agent"))  # counts only if allowed
        rewards.append(Reward(rollout_id=rollout, value=5.0, source="evaluator", span_id="s1"))  # a step
        store.add_rewards(rewards)
        status = RolloutStatus.failed if i % 4 == 0 else RolloutStatus.succeeded
        store.update_status(rollout, status, attempt=attempt)  # failed with attempts left: requeued
    yield store
    store.close()


QUERIES = [
    RolloutQuery(),
    RolloutQuery(run="a", limit=7, offset=3),
    RolloutQuery(status=RolloutStatus.queued, oldest_first=True),
    RolloutQuery(task="task-3"),
    RolloutQuery(task="what is 1"),
    RolloutQuery(worker="node1/"),
    RolloutQuery(agent="writer", run="a"),
    RolloutQuery(reward_min=0.5),
    RolloutQuery(reward_min=0.2, reward_max=0.6, run="b"),
    RolloutQuery(group_id="g2", mode="train"),
    RolloutQuery(limit=5, count_cap=10),
    RolloutQuery(limit=0),
]


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: q.model_dump_json(exclude_defaults=True))
def test_sqlite_and_http_agree_with_the_scan(store: SQLiteStore, query: RolloutQuery) -> None:
    expected = query_rollouts_by_scanning(store, query)
    assert store.query_rollouts(query) == expected
    authority = TokenAuthority.generate()
    with (
        serve_app(create_store_app(store, authority)) as url,
        StoreClient(url, authority.admin_token) as client,
    ):
        assert client.query_rollouts(query) == expected


def test_rows_carry_the_reward_rule_and_the_last_worker(store: SQLiteStore) -> None:
    page = store.query_rollouts(RolloutQuery(limit=100, count_cap=100))
    assert page.total == 60 and not page.total_capped and len(page.rows) == 60
    for row in page.rows:
        assert row.reward == rollout_reward(store, row.rollout)
        attempts = store.list_attempts(row.rollout.id) if row.rollout.attempt_count else []
        assert row.worker == (attempts[-1].worker_id if attempts else None)
    # the agent's own 0.99 counts where the rollout lets it, and is the last reward there
    assert any(row.reward == 0.99 for row in page.rows)
    capped = store.query_rollouts(RolloutQuery(limit=5, count_cap=10))
    assert capped.total == 10 and capped.total_capped
