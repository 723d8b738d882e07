"""The harness's price in each step's metrics, on an agent whose costs are known (tests/trainer/agents/
harness_agent.py: a sleep before its one model call, a CPU burn after it), started cold and warm: the
rollout phase splits into generation, idle time, start-up and the agents' own time and CPU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.trainer.test_loop import make_trainer
from tether.runner import CommandAgent
from tether.runner.warm import WarmStarts
from tether.store import Task

AGENT = Path(__file__).parent / "agents" / "harness_agent.py"
STARTUP_S, BURN_S = 0.6, 0.4
ROLLOUTS = 4


def constant(task: dict, output: str | None) -> float:
    return 1.0


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_steps_metrics_split_the_rollout_phase_into_the_harness_costs(tmp_path: Path, warm: bool) -> None:
    starts = WarmStarts() if warm else None
    agent = CommandAgent(f"{sys.executable} {AGENT} {STARTUP_S} {BURN_S}", warm=starts)
    trainer = make_trainer(
        tmp_path, steps=1, group_size=ROLLOUTS, tasks_per_step=1, n_workers=ROLLOUTS, val_every=0
    )
    try:
        result = trainer.fit(agent, [Task(id="t", input={})], [], constant)
    finally:
        if starts is not None:
            starts.close()
    (step,) = [r for r in result.history if r["kind"] == "train"]
    assert step["rollouts"] == ROLLOUTS and step["failed_rollouts"] == 0
    # start-up (the sleep, plus the interpreter and imports) comes before the first call; the burn after it
    assert step["startup_seconds"] >= STARTUP_S
    assert step["agent_seconds"] >= BURN_S
    # every agent's CPU is counted, warm ones' through their zygote's report
    assert step["agent_cpu_seconds"] >= ROLLOUTS * BURN_S
    # the phase is generation plus the time no call ran, and the ratio says by how much it exceeds it
    generation, idle = step["generation_seconds"], step["idle_seconds"]
    assert 0 < generation < step["rollout_seconds"]
    assert generation + idle == pytest.approx(step["rollout_seconds"])
    assert idle >= STARTUP_S + BURN_S  # no call runs while all the agents start, nor while they burn
    assert step["harness_ratio"] == pytest.approx(step["rollout_seconds"] / generation)
