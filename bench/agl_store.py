"""Run inside bench/.venv-agl: Agent Lightning 0.3.0's store, the counterpart of bench/store_bench.py.

    python agl_store.py N WAKE_SAMPLES

InMemoryLightningStore in process, and LightningStoreClient -> LightningStoreServer on loopback. One record
per call: enqueue_rollout then dequeue_rollout, add_span (an LLM-call span), add_span of a reward annotation
(how 0.3.0 records rewards). Wake-up: update_attempt(succeeded) to wait_for_rollouts returning; over HTTP
the client refuses timeouts above 0.1 s, so the waiter polls with 0.1 s waits, as the client intends.
Prints one JSON line: {"in process": {...}, "over HTTP": {...}}.
"""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import sys
import time

from agentlightning.store.client_server import LightningStoreClient, LightningStoreServer
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.types import Span

REWARD_ATTRIBUTES = {"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": 1.0}


def _rate(count: int, started: float) -> float:
    return count / (time.perf_counter() - started)


async def _wait(store, rollout_id: str, remote: bool) -> None:  # noqa: ANN001
    if not remote:
        await store.wait_for_rollouts(rollout_ids=[rollout_id], timeout=30)
        return
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if await store.wait_for_rollouts(rollout_ids=[rollout_id], timeout=0.1):
            return


async def wake_latency(store, closer, samples: int, remote: bool) -> list[float]:  # noqa: ANN001
    latencies = []
    for _ in range(samples):
        attempted = await closer.start_rollout(input={})
        waiter = asyncio.create_task(_wait(store, attempted.rollout_id, remote))
        await asyncio.sleep(0.02)  # let the waiter block first
        finished = time.perf_counter()
        await closer.update_attempt(attempted.rollout_id, attempted.attempt.attempt_id, status="succeeded")
        await waiter
        latencies.append(time.perf_counter() - finished)
    return latencies


async def measure(store, closer, n: int, samples: int, remote: bool) -> dict[str, float]:  # noqa: ANN001
    started = time.perf_counter()
    for i in range(n):
        await store.enqueue_rollout(input={"i": i})
    claims = [await store.dequeue_rollout(worker_id="bench") for _ in range(n)]
    rollouts = _rate(n, started)
    rid, aid = claims[0].rollout_id, claims[0].attempt.attempt_id
    started = time.perf_counter()
    for i in range(n):
        span = Span.from_attributes(
            attributes={"gen_ai.request.model": "policy"},
            rollout_id=rid,
            attempt_id=aid,
            sequence_id=i + 1,
            name="llm",
            start_time=float(i),
            end_time=float(i + 1),
        )
        await store.add_span(span)
    spans = _rate(n, started)
    started = time.perf_counter()
    for i in range(n):
        span = Span.from_attributes(
            attributes=REWARD_ATTRIBUTES,
            rollout_id=rid,
            attempt_id=aid,
            sequence_id=n + i + 1,
            name="agentlightning.annotation",
        )
        await store.add_span(span)
    rewards = _rate(n, started)
    wake = statistics.median(await wake_latency(store, closer, samples, remote)) * 1000
    return {"rollouts_per_s": rollouts, "spans_per_s": spans, "rewards_per_s": rewards, "wake_p50_ms": wake}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def main() -> None:
    n, samples = int(sys.argv[1]), int(sys.argv[2])
    local = InMemoryLightningStore()
    results = {"in process": await measure(local, local, n, samples, remote=False)}
    backing = InMemoryLightningStore(thread_safe=True)
    port = _free_port()
    server = LightningStoreServer(backing, host="127.0.0.1", port=port)
    await server.start()
    client = LightningStoreClient(f"http://127.0.0.1:{port}")
    try:
        results["over HTTP"] = await measure(client, backing, n, samples, remote=True)
    finally:
        await client.close()
        await server.stop()
    print(json.dumps(results))


if __name__ == "__main__":
    asyncio.run(main())
