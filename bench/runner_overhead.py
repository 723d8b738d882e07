"""Runner overhead, and how soon a waiter learns that a rollout ended.

    .venv/bin/python -m bench.runner_overhead [--rollouts 200] [--workers 8]

1. A trivial command agent (`true`) run by the runner (claim, launch, close, in a durable SQLite store)
   against the floor: the same number of `true` processes launched with the same concurrency and no
   bookkeeping. The ratio says how much of the rate the runner itself costs.
2. From `update_status(succeeded)` to a waiter's `wait_for` returning: in process (a condition variable)
   and over HTTP (a long-poll to the store API). The reference polls once per second per rollout.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
from pathlib import Path

from tether.runner import AgentEndpoints, CommandAgent, Runner, RunnerConfig
from tether.store import RolloutRequest, RolloutStatus, SQLiteStore, StoreClient, Task
from tether.store.auth import TokenAuthority


async def floor_rate(rollouts: int, workers: int) -> float:
    semaphore = asyncio.Semaphore(workers)

    async def one() -> None:
        async with semaphore:
            process = await asyncio.create_subprocess_exec("true")
            await process.wait()

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(rollouts)))
    return rollouts / (time.perf_counter() - started)


async def runner_rate(rollouts: int, workers: int, folder: Path) -> float:
    store = SQLiteStore(folder / "runner.db")
    auth = TokenAuthority.generate()
    runner = Runner(
        store,
        CommandAgent("true"),
        AgentEndpoints("http://127.0.0.1:9", auth),
        None,
        RunnerConfig(n_workers=workers, timeout_s=60),
    )
    requests = [RolloutRequest(task=Task(input={"i": i})) for i in range(rollouts)]
    started = time.perf_counter()
    try:
        outcomes = await runner.run(requests)
    finally:
        await runner.stop()
    assert all(o.status == RolloutStatus.succeeded for o in outcomes)
    store.close()
    return rollouts / (time.perf_counter() - started)


def _wait_and_stamp(store, rollout_id: str, returned: list[float]) -> None:  # noqa: ANN001
    store.wait_for([rollout_id], 30)
    returned.append(time.perf_counter())


def wake_latency(store, closer: SQLiteStore, samples: int) -> list[float]:  # noqa: ANN001
    """Seconds from update_status(succeeded) on `closer` to wait_for returning on `store`."""
    latencies = []
    for _ in range(samples):
        claim = closer.start_session()
        returned: list[float] = []
        waiter = threading.Thread(target=_wait_and_stamp, args=(store, claim.rollout.id, returned))
        waiter.start()
        time.sleep(0.02)  # let the waiter block first
        finished = time.perf_counter()
        closer.update_status(claim.rollout.id, RolloutStatus.succeeded)
        waiter.join()
        latencies.append(returned[0] - finished)
    return latencies


def http_wake_latency(folder: Path, samples: int) -> list[float]:
    from tether.gateway.server import BackgroundServer
    from tether.store.server import create_store_app

    store = SQLiteStore(folder / "http.db")
    auth = TokenAuthority.generate()
    with BackgroundServer(create_store_app(store, auth)) as url:
        client = StoreClient(url, auth.admin_token)
        try:
            return wake_latency(client, store, samples)
        finally:
            client.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rollouts", type=int, default=200)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--samples", type=int, default=30)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tether-bench-"))
    floor = asyncio.run(floor_rate(args.rollouts, args.workers))
    ours = asyncio.run(runner_rate(args.rollouts, args.workers, folder))
    local_store = SQLiteStore(folder / "local.db")
    local = wake_latency(local_store, local_store, args.samples)
    remote = http_wake_latency(folder, args.samples)
    print(f"| trivial agent (`true`), {args.workers} workers | rollouts/s |\n|---|---|")
    print(f"| floor: bare process launches | {floor:.0f} |")
    print(f"| runner (claim, launch, close; SQLite) | {ours:.0f} ({ours / floor:.2f}x of the floor) |")
    print("\n| rollout end -> waiter knows | p50 | max |\n|---|---|---|")
    for name, values in (("in process (condition variable)", local), ("over HTTP (long-poll)", remote)):
        print(f"| {name} | {statistics.median(values) * 1000:.2f} ms | {max(values) * 1000:.2f} ms |")
    print("| reference (polls once a second) | ~500 ms expected | ~1000 ms |")


if __name__ == "__main__":
    main()
