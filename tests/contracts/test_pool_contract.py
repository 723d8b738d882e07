"""What every worker pool (`tether.runner.runner.Pool`) does, on each backend in `POOLS` (conftest), driven
by the runner as the commands drive it: every enqueued rollout finishes, once per attempt, with its own
reward; an agent that crashes is a failed rollout carrying its error; one that outlives the timeout is
timed out; no rollout is lost or run twice."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.contracts.conftest import PoolRig
from tether.runner import CommandAgent, Runner, RunnerConfig
from tether.runner.driver import RolloutOutcome
from tether.runner.rewards import load_callable
from tether.stack import local_stack
from tether.store import RolloutRequest, RolloutStatus, SQLiteStore, Task

AGENTS = Path(__file__).parent / "agents"
RUN = "contract"


@dataclass
class Ran:
    outcomes: list[RolloutOutcome]
    store: SQLiteStore
    runs: Counter[tuple[str, int]]  # (rollout, attempt) -> how many times the agent ran it

    def attempts(self, outcome: RolloutOutcome) -> list[RolloutStatus]:
        return [
            a.status for a in sorted(self.store.list_attempts(outcome.rollout_id), key=lambda a: a.number)
        ]


def run_pool(rig: PoolRig, tasks: list[tuple[dict[str, Any], int]], *, timeout_s: float = 60.0) -> Ran:
    """Run `tasks` (their fields, and their attempts) to the end with the backend's pool, two workers."""
    log = rig.folder / "runs.log"
    log.touch()
    requests = [
        RolloutRequest(
            task=Task(id=f"t{i}", input={"q": f"question {i}", "log": str(log), **fields}),
            max_attempts=max_attempts,
        )
        for i, (fields, max_attempts) in enumerate(tasks)
    ]
    store = rig.store
    agent = CommandAgent(f"{sys.executable} {AGENTS / 'scripted_agent.py'}")
    evaluator = load_callable(f"{AGENTS / 'reward.py'}:promised")
    config = RunnerConfig(n_workers=2, timeout_s=timeout_s, heartbeat_s=0.5)

    async def scenario(runner: Runner) -> list[RolloutOutcome]:
        try:
            return await runner.run(requests)
        finally:
            await runner.stop()

    with local_stack(store, rig.authority, [], host=rig.backend.host) as stack:
        runner = Runner(store, agent, stack.endpoints, evaluator, config, run=RUN, pools=rig.backend.factory)
        outcomes = asyncio.run(scenario(runner))
    runs = Counter(
        (rollout, int(attempt))
        for rollout, attempt in (line.split() for line in log.read_text().splitlines())
    )
    return Ran(outcomes, store, runs)


def test_every_rollout_finishes_once_with_its_own_reward(pool_rig: PoolRig) -> None:
    rewards = [0.5, 0.125, 1.0, 0.0, 0.75, 0.25]
    ran = run_pool(pool_rig, [({"reward": r}, 1) for r in rewards])
    assert [o.status for o in ran.outcomes] == [RolloutStatus.succeeded] * len(rewards)
    assert [o.reward for o in ran.outcomes] == rewards
    assert [o.attempts for o in ran.outcomes] == [1] * len(rewards)
    assert ran.runs == Counter({(o.rollout_id, 1): 1 for o in ran.outcomes})  # each ran once, none lost
    rollouts = {r.id: r for r in ran.store.list_rollouts(run=RUN, limit=100)}
    assert sorted(rollouts) == sorted(o.rollout_id for o in ran.outcomes)
    for i, outcome in enumerate(ran.outcomes):
        assert rollouts[outcome.rollout_id].output == f"question {i}"
        assert ran.attempts(outcome) == [RolloutStatus.succeeded]
        (primary,) = [r for r in ran.store.query_rewards(outcome.rollout_id) if r.primary]
        assert primary.value == rewards[i] and primary.source == "evaluator"


def test_a_crashing_agent_is_a_failed_rollout_with_its_error(pool_rig: PoolRig) -> None:
    """A crash fails the attempt with the agent's exit code and stderr; with attempts left it is run again,
    once; the other rollouts are not disturbed."""
    ran = run_pool(
        pool_rig, [({"mode": "crash", "reward": 1.0}, 2), ({"reward": 0.5}, 1), ({"reward": 0.25}, 1)]
    )
    crashed, *others = ran.outcomes
    assert crashed.status == RolloutStatus.failed and crashed.attempts == 2
    assert "exited with code 3" in (crashed.error or "") and "the agent broke" in (crashed.error or "")
    assert ran.attempts(crashed) == [RolloutStatus.failed, RolloutStatus.failed]
    assert [(o.status, o.reward) for o in others] == [
        (RolloutStatus.succeeded, 0.5),
        (RolloutStatus.succeeded, 0.25),
    ]
    expected = {(crashed.rollout_id, 1): 1, (crashed.rollout_id, 2): 1} | {
        (o.rollout_id, 1): 1 for o in others
    }
    assert ran.runs == Counter(expected)


def test_an_agent_past_the_timeout_is_timed_out(pool_rig: PoolRig) -> None:
    ran = run_pool(pool_rig, [({"mode": "hang", "reward": 1.0}, 1), ({"reward": 0.5}, 1)], timeout_s=4.0)
    hung, other = ran.outcomes
    assert hung.status == RolloutStatus.timed_out and "timed out" in (hung.error or "")
    assert hung.attempts == 1 and ran.attempts(hung) == [RolloutStatus.timed_out]
    assert (other.status, other.reward) == (RolloutStatus.succeeded, 0.5)
    assert ran.runs == Counter({(hung.rollout_id, 1): 1, (other.rollout_id, 1): 1})
