"""Tether's store: rollouts enqueued+claimed, spans and rewards written per second, wake-up latency.

Durable SQLite (a file, WAL), called in process and over HTTP (the store API on loopback, same process).
One record per call on both sides, as an agent writes them, so batching does not flatter either.
The reference's counterpart is bench/agl_store.py, run in its own venv.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from bench.runner_overhead import wake_latency
from tether.store import RolloutRequest, SQLiteStore, StoreClient, Task
from tether.store.auth import TokenAuthority
from tether.store.records import Reward, Span


@dataclass
class StoreFigures:
    rollouts_per_s: float
    spans_per_s: float
    rewards_per_s: float
    wake_p50_ms: float


def _rate(count: int, started: float) -> float:
    return count / (time.perf_counter() - started)


def measure(store, closer: SQLiteStore, n: int, wake_samples: int) -> StoreFigures:  # noqa: ANN001
    started = time.perf_counter()
    for i in range(n):
        store.enqueue([RolloutRequest(task=Task(input={"i": i}))])
    claims = [store.claim("bench") for _ in range(n)]
    rollouts = _rate(n, started)
    rollout_id = claims[0].rollout.id
    started = time.perf_counter()
    for i in range(n):
        store.add_spans([Span(rollout_id=rollout_id, attempt=1, name="llm", start_time=i, end_time=i + 1)])
    spans = _rate(n, started)
    started = time.perf_counter()
    for i in range(n):
        store.add_rewards([Reward(rollout_id=rollout_id, attempt=1, value=float(i % 2), name=f"r{i}")])
    rewards = _rate(n, started)
    wake = statistics.median(wake_latency(store, closer, wake_samples)) * 1000
    return StoreFigures(rollouts, spans, rewards, wake)


def in_process(folder: Path, n: int, wake_samples: int) -> StoreFigures:
    store = SQLiteStore(folder / "inproc.db")
    try:
        return measure(store, store, n, wake_samples)
    finally:
        store.close()


def over_http(folder: Path, n: int, wake_samples: int) -> StoreFigures:
    from tether.gateway.server import BackgroundServer
    from tether.store.server import create_store_app

    store = SQLiteStore(folder / "http.db")
    auth = TokenAuthority.generate()
    try:
        with BackgroundServer(create_store_app(store, auth)) as url:
            with StoreClient(url, auth.admin_token) as client:
                return measure(client, store, n, wake_samples)
    finally:
        store.close()
