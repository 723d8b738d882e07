"""A worker node dies mid-run: its attempts are abandoned (the worker process is gone, or stops
heartbeating), requeued without using up an attempt, and run by the worker on the other node; every
rollout still finishes, and nothing recorded is lost."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from ray.cluster_utils import Cluster

from tether.ray.cluster import RaySettings, connect, node_label
from tether.runner import CommandAgent, Runner, RunnerConfig
from tether.runner.pool import worker_node
from tether.runner.ray_pool import RayPool
from tether.stack import local_stack
from tether.store import RolloutRequest, RolloutStatus, SQLiteStore, Task
from tether.store.auth import TokenAuthority

AGENTS = Path(__file__).parent / "agents"


def test_every_rollout_finishes_when_a_worker_node_dies(tmp_path: Path, ray_cluster: Cluster) -> None:
    doomed = ray_cluster.add_node(num_cpus=2, resources={"kill_slot": 1})
    ray_cluster.wait_for_nodes()
    cluster = connect(RaySettings(address=ray_cluster.address, agent_resources={"kill_slot": 1}))
    doomed_label = node_label(doomed.node_id, doomed.node_ip_address)
    store = SQLiteStore(tmp_path / "store.db")
    authority = TokenAuthority.generate()
    agent = CommandAgent(f"{sys.executable} {AGENTS / 'sleep_agent.py'}")
    tasks = [Task(id=f"t{i}", input={"q": f"q{i}", "sleep": 1.5}) for i in range(6)]
    requests = [RolloutRequest(task=task, key=task.id, max_attempts=1) for task in tasks]

    async def scenario(runner: Runner) -> list[RolloutStatus]:
        runner.start()
        ids = [r.id for r in await runner.enqueue(requests)]
        while not any(worker_node(a.worker_id) == doomed_label for i in ids for a in store.list_attempts(i)):
            await asyncio.sleep(0.2)
        await asyncio.to_thread(ray_cluster.remove_node, doomed, False)
        try:
            return [o.status for o in await runner.wait(ids)]
        finally:
            await runner.stop()

    with local_stack(store, authority, [], host=cluster.bind_host, heartbeat_timeout_s=3.0) as stack:
        config = RunnerConfig(n_workers=2, timeout_s=60, heartbeat_s=0.5)
        runner = Runner(
            store,
            agent,
            stack.endpoints,
            None,
            config,
            run="node-loss",
            pools=RayPool.factory(cluster, authority),
        )
        statuses = asyncio.run(scenario(runner))
    assert statuses == [RolloutStatus.succeeded] * len(tasks)
    rollouts = store.list_rollouts(run="node-loss", limit=100)
    attempts = {r.id: store.list_attempts(r.id) for r in rollouts}
    lost = [a for tries in attempts.values() for a in tries if worker_node(a.worker_id) == doomed_label]
    assert any(a.status != RolloutStatus.succeeded for a in lost)  # the attempt the node died with
    # Each rollout's last attempt succeeded on a surviving node, and every output was kept.
    for rollout in rollouts:
        last = max(attempts[rollout.id], key=lambda a: a.number)
        assert last.status == RolloutStatus.succeeded and worker_node(last.worker_id) != doomed_label
        assert rollout.output == rollout.input["q"]
