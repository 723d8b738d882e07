"""Scale-out on Ray, as ratios measured in one run (`docs/benchmarks.md`, "Scale-out on Ray").

    .venv/bin/python -m bench.ray_scale [--per-worker 6] [--overhead-rollouts 30] [--model smollm2-135m]

1. Rollouts/s of an agent whose time is its own work (a tool that sleeps 1 s) with 1, 2 and 4 Ray
   rollout workers, against linear scaling from 1 worker (goal: at least 0.9x).
2. Overhead per rollout of a Ray worker (claims and closes over the store's HTTP API, from an actor)
   against a local worker (in process), with an agent that does nothing (`true`).
3. Update time of the same batch with the local learner, and with 1 and 2 Ray learner ranks on CPU
   (data parallel, and 2 FSDP2 ranks).

A local Ray cluster is started with enough logical CPUs for the workers: the agents sleep, so the CPU
is not what limits them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.trainer_bench import RESPONSE, batch_ids, model_folder
from tether.adapters.transitions import Transition
from tether.algorithms import assign_advantages
from tether.ray.cluster import RayCluster, RaySettings, connect
from tether.runner import CommandAgent, Runner, RunnerConfig
from tether.runner.ray_pool import RayPool
from tether.stack import local_stack
from tether.store import RolloutRequest, SQLiteStore, Task
from tether.store.auth import TokenAuthority

SLEEP_AGENT = Path(__file__).resolve().parent.parent / "tests" / "runner" / "agents" / "sleep_agent.py"


def requests(count: int, sleep: float, prefix: str) -> list[RolloutRequest]:
    return [
        RolloutRequest(task=Task(id=f"{prefix}{i}", input={"q": f"q{i}", "sleep": sleep}), key=f"{prefix}{i}")
        for i in range(count)
    ]


async def timed_run(runner: Runner, batch: list[RolloutRequest], pool: RayPool | None) -> float:
    """Seconds for the batch, counted once every worker is placed and started."""
    runner.start()
    if pool is not None:
        await asyncio.to_thread(pool.placements, 300)
    try:
        started = time.perf_counter()
        outcomes = await runner.run(batch)
        seconds = time.perf_counter() - started
    finally:
        await runner.stop()
    failed = [o for o in outcomes if o.status.value != "succeeded"]
    if failed:
        raise RuntimeError(f"{len(failed)} rollouts failed: {failed[0].error}")
    return seconds


def rate(
    cluster: RayCluster | None, folder: Path, command: str, workers: int, batch: list[RolloutRequest]
) -> float:
    store = SQLiteStore(folder / f"{batch[0].key}-{workers}-{cluster is not None}.db")
    authority = TokenAuthority.generate()
    host = cluster.bind_host if cluster is not None else "127.0.0.1"
    with local_stack(store, authority, [], host=host) as stack:
        config = RunnerConfig(n_workers=workers, timeout_s=120)
        factory = RayPool.factory(cluster, authority) if cluster is not None else None
        runner = Runner(
            store, CommandAgent(command), stack.endpoints, None, config, run="bench", pools=factory
        )
        pool = runner.pool if isinstance(runner.pool, RayPool) else None
        seconds = asyncio.run(timed_run(runner, batch, pool))
    store.close()
    return len(batch) / seconds


def scaling(cluster: RayCluster, folder: Path, per_worker: int) -> None:
    command = f"{sys.executable} {SLEEP_AGENT}"
    print(f"sleep-1s agent, {per_worker} rollouts per worker:", flush=True)
    rates: dict[int, float] = {}
    for k in (1, 2, 4):
        rates[k] = rate(cluster, folder, command, k, requests(per_worker * k, 1.0, f"s{k}-"))
        print(
            f"  {k} Ray worker(s): {rates[k]:.3f} rollouts/s, {rates[k] / (k * rates[1]):.3f}x linear",
            flush=True,
        )


def overhead(cluster: RayCluster, folder: Path, count: int) -> list[str]:
    local = [rate(None, folder, "true", 1, requests(count, 0.0, f"l{i}-")) for i in range(2)]
    ray = [rate(cluster, folder, "true", 1, requests(count, 0.0, f"r{i}-")) for i in range(2)]
    local_ms, ray_ms = 1000 / max(local), 1000 / max(ray)
    return [
        f"per rollout of a `true` agent, 1 worker, best of 2 x {count}: local {local_ms:.1f} ms, "
        f"Ray {ray_ms:.1f} ms "
        f"(+{ray_ms - local_ms:.1f} ms, {ray_ms / local_ms:.2f}x)"
    ]


def update_times(model: str, steps: int) -> None:
    import torch

    from tether.learner import PolicyTrainer, TrainConfig
    from tether.learner.ray_learner import RayLearner

    config = TrainConfig(model=str(model_folder(model)), seed=0, bf16=False)
    vocab = json.loads((model_folder(model) / "config.json").read_text())["vocab_size"]
    batch = assign_advantages(
        [
            Transition(
                f"r{i}",
                "t",
                "g",
                1,
                0,
                None,
                0,
                prompt,
                response,
                [-1.0] * RESPONSE,
                [1] * RESPONSE,
                reward=i % 2,
            )
            for i, (prompt, response) in enumerate(batch_ids(vocab))
        ]
    )
    torch.set_num_threads(2)
    # One learner at a time: each holds the model and a batch's activations (several GB with 2 ranks).
    makers: dict[str, Callable[[], Any]] = {
        "local": lambda: PolicyTrainer(config),
        "Ray, 1 rank": lambda: RayLearner(config, 1),
        "Ray, 2 ranks (data parallel)": lambda: RayLearner(config, 2),
        "Ray, 2 FSDP2 ranks": lambda: RayLearner(config, 2, sharding="fsdp"),
    }
    print(f"update of {len(batch.samples)} samples ({model}, LoRA), median of {steps} after one warm-up:")
    medians: dict[str, float] = {}
    for name, make in makers.items():
        learner = make()
        times = []
        for _ in range(steps + 1):
            started = time.perf_counter()
            learner.step(batch)
            times.append(time.perf_counter() - started)
        if isinstance(learner, RayLearner):
            learner.close()
        del learner
        medians[name] = statistics.median(times[1:])
        print(f"  {name}: {medians[name]:.2f} s ({medians[name] / medians['local']:.2f}x local)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--per-worker", type=int, default=6)
    parser.add_argument("--overhead-rollouts", type=int, default=30)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--update-steps", type=int, default=3)
    parser.add_argument("--only-update", action="store_true", help="measure only the update times")
    args = parser.parse_args()
    cluster = connect(RaySettings(), local_cpus=8)
    with tempfile.TemporaryDirectory() as tmp:
        if not args.only_update:
            scaling(cluster, Path(tmp), args.per_worker)
            for line in overhead(cluster, Path(tmp), args.overhead_rollouts):
                print(line, flush=True)
    update_times(args.model, args.update_steps)
    cluster.shutdown()


if __name__ == "__main__":
    main()
