"""A validation's record: the score, its 95% bootstrap interval and every task's reward (for a paired
comparison of two validations), through the real loop on the tiny model."""

from __future__ import annotations

import statistics
from pathlib import Path

from tether.rewards.intervals import bootstrap_interval, paired_difference_interval
from tether.runner import CallableAgent
from tether.store import SQLiteStore, Task
from tether.store.auth import TokenAuthority
from tether.trainer.loop import Trainer, TrainerConfig
from tether.trainer.metrics import read_metrics
from tether.trainer.policy import TrainConfig

# What the agent answers decides the reward, so the rewards are known whatever the model says.
VAL = [Task(id=f"v{i}", input={"reply": "yes" if i % 4 else "no"}) for i in range(8)]


async def fixed_agent(task: dict, llm) -> str:  # noqa: ANN001, ARG001
    return str(task["reply"])


def said_yes(task: dict, output: str | None) -> float:
    return float(output == "yes")


def test_each_validation_records_its_interval_and_the_reward_of_every_task(tmp_path: Path) -> None:
    config = TrainerConfig(
        model="tiny-random",
        steps=0,
        n_workers=4,
        timeout_s=60,
        policy=TrainConfig(model="tiny-random", micro_batch_tokens=4096),
    )
    trainer = Trainer(config, tmp_path / "run", SQLiteStore(tmp_path / "store.db"), TokenAuthority.generate())
    result = trainer.fit(CallableAgent(fixed_agent), VAL[:2], VAL, said_yes)
    validations = [r for r in read_metrics(tmp_path / "run") if r["kind"] == "val"]
    assert len(validations) == 2 and validations == [r for r in result.history if r["kind"] == "val"]
    expected = {task.id: said_yes(task.input, str(task.input["reply"])) for task in VAL}
    for record in validations:
        assert record["val_rewards"] == expected
        assert record["val_score"] == statistics.fmean(expected.values()) == 0.75
        interval = bootstrap_interval(list(record["val_rewards"].values()))
        assert (record["val_ci_low"], record["val_ci_high"]) == interval
        assert 0.0 <= record["val_ci_low"] < 0.75 < record["val_ci_high"] <= 1.0
    before, after = (record["val_rewards"] for record in validations)
    assert paired_difference_interval(before, after) == (0.0, 0.0)
