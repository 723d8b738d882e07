"""`Runner`: a worker pool and a driver for one run, in one object (what the CLI and the trainer use).

    runner = Runner(store, agent, endpoints, evaluator, config, run="my-run")
    outcomes = await runner.run(requests)   # enqueue, let the pool work, learn outcomes from the store

The pool (`tether.runner.pool`) claims and runs the run's rollouts; the driver (`tether.runner.driver`)
enqueues them and reads their outcomes from the store, so rollouts that workers elsewhere finished count.
`config.n_workers = 0` makes a pure driver, for when the workers run elsewhere; `pools` builds another
pool in place of the local one (the Ray pool of `tether.runner.ray_pool`, say), called as `WorkerPool` is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from tether.runner.agents import Agent
from tether.runner.driver import Driver, RolloutOutcome, RunnerStats
from tether.runner.pool import AgentEndpoints, RunnerConfig, WorkerPool
from tether.runner.rewards import Evaluator
from tether.store.base import Store
from tether.store.records import Rollout, RolloutRequest


class Pool(Protocol):
    """What the runner needs of a worker pool (`WorkerPool` is one)."""

    running: int

    def start(self) -> None: ...

    async def stop(self, requeue: bool = False) -> None:
        """Stop the workers. What they still run ends `cancelled`, or with `requeue` goes back to the queue
        without using up an attempt (an interrupted command's rollouts, which its next start runs)."""

    def wake(self) -> None: ...

    def failure(self) -> str | None: ...


PoolFactory = Callable[
    [Store, Agent, AgentEndpoints, Evaluator | None, RunnerConfig, str | None, Callable[[], None] | None],
    Pool,
]


class Runner:
    def __init__(
        self,
        store: Store,
        agent: Agent,
        endpoints: AgentEndpoints,
        evaluator: Evaluator | None = None,
        config: RunnerConfig | None = None,
        on_update: Callable[[Runner], None] | None = None,
        run: str | None = None,
        pools: PoolFactory | None = None,
    ) -> None:
        self.store = store
        self.config = config or RunnerConfig()
        self.on_update = on_update
        self.pool = (pools or WorkerPool)(store, agent, endpoints, evaluator, self.config, run, self._notify)
        agent_rewards = self.config.agent_rewards
        own_rewards = evaluator is None if agent_rewards is None else agent_rewards
        self.driver = Driver(store, run, self._notify, own_rewards, read_once=self.config.read_once)

    @property
    def run_name(self) -> str | None:
        return self.driver.run

    @property
    def stats(self) -> RunnerStats:
        self.driver.stats.running = self.pool.running
        return self.driver.stats

    def start(self) -> None:
        self.pool.start()

    async def stop(self, requeue: bool = False) -> None:
        await self.pool.stop(requeue)

    async def enqueue(self, requests: Sequence[RolloutRequest]) -> list[Rollout]:
        rollouts = await self.driver.submit(requests)
        self.pool.wake()
        return rollouts

    async def wait(self, rollout_ids: Sequence[str]) -> list[RolloutOutcome]:
        return await self.driver.wait(rollout_ids, self.pool.failure)

    async def run(self, requests: Sequence[RolloutRequest]) -> list[RolloutOutcome]:
        """Run these rollouts to completion; their outcomes, in order."""
        self.start()
        rollouts = await self.enqueue(requests)
        return await self.wait([r.id for r in rollouts])

    def _notify(self) -> None:
        if self.on_update is not None:
            self.on_update(self)
