"""Processes claiming from one PostgreSQL database never take the same rollout: thousands of claims."""

from __future__ import annotations

import multiprocessing
from typing import Any

from tether.store.postgres import PostgresStore
from tether.store.records import RolloutRequest, RolloutStatus, Task

CLAIMERS = 2
ROLLOUTS = 3000


def claim_until_empty(url: str, worker_id: str, barrier: Any, results: Any) -> None:
    store = PostgresStore(url, pool_size=2)
    barrier.wait(timeout=60)
    claimed = []
    while (claim := store.claim(worker_id)) is not None:
        claimed.append(claim.rollout.id)
    store.close()
    results.put(claimed)


def test_processes_sharing_a_database_never_claim_the_same_rollout(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    requests = [RolloutRequest(task=Task(id=f"t{n % 10}", input={"n": n})) for n in range(ROLLOUTS)]
    expected = {r.id for r in store.enqueue(requests)}
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(CLAIMERS)
    results = context.Queue()
    workers = [
        context.Process(target=claim_until_empty, args=(pg_url, f"proc-{n}", barrier, results))
        for n in range(CLAIMERS)
    ]
    for worker in workers:
        worker.start()
    claimed = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0

    every_claim = [rollout_id for batch in claimed for rollout_id in batch]
    assert len(every_claim) == len(set(every_claim)) == ROLLOUTS
    assert set(every_claim) == expected
    assert all(batch for batch in claimed), "one process claimed nothing: the claims did not interleave"
    running = store.list_rollouts(status=RolloutStatus.running, limit=ROLLOUTS + 1)
    assert len(running) == ROLLOUTS and all(r.attempt_count == 1 for r in running)
    assert store.list_rollouts(status=RolloutStatus.queued) == []
    store.close()
