"""A validation's record: the score, its 95% bootstrap interval and every task's reward (for a paired
comparison of two validations), through the real loop on the tiny model."""

from __future__ import annotations

import statistics
from pathlib import Path

import openai
import pytest

from tether.contracts import Meta
from tether.learner.policy import TrainConfig
from tether.rewards.intervals import bootstrap_interval, paired_difference_interval
from tether.runner import CallableAgent
from tether.store import SQLiteStore, Task
from tether.store.auth import TokenAuthority
from tether.trainer.coverage import CoverageConfig, pass_at_k
from tether.trainer.loop import Trainer, TrainerConfig
from tether.trainer.metrics import read_metrics

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


async def sampling_agent(task: dict, llm) -> str:  # noqa: ANN001, ARG001
    """Says what the policy's one sampled token says, so that its samples' rewards vary at a temperature."""
    client = openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0)
    reply = await client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": "yes or no?"}], max_tokens=1
    )
    return reply.choices[0].message.content or ""


def even_reply(task: dict, output: str | None) -> float:
    return float(len((output or "").encode()) % 2 == 0)


def test_val_k_records_pass_at_k_and_mean_at_k_of_k_samples_per_task(tmp_path: Path) -> None:
    k = 4
    config = TrainerConfig(
        model="tiny-random",
        steps=0,
        n_workers=8,
        timeout_s=60,
        seed=3,
        policy=TrainConfig(model="tiny-random", micro_batch_tokens=4096),
        coverage=CoverageConfig(k=k, temperature=1.5),
    )
    store = SQLiteStore(tmp_path / "store.db")
    trainer = Trainer(config, tmp_path / "run", store, TokenAuthority.generate())
    trainer.fit(CallableAgent(sampling_agent), VAL[:2], VAL, even_reply)
    validations = [r for r in read_metrics(tmp_path / "run") if r["kind"] == "val"]
    sampled: dict[str, list[float]] = {}  # before and after (steps=0): k samples each, in this order
    for rollout in sorted(store.list_rollouts(limit=1000), key=lambda r: r.created_at):
        if rollout.group_id and rollout.group_id.endswith("@val0k"):
            assert rollout.mode == "val" and rollout.metadata[Meta.SAMPLING_OVERRIDES] == {"temperature": 1.5}
            sampled.setdefault(rollout.task_id, []).append(even_reply({}, rollout.output))
    assert sorted(sampled) == sorted(t.id for t in VAL) and {len(r) for r in sampled.values()} == {2 * k}
    numbers = [r.sample for r in store.list_rollouts(limit=1000) if str(r.group_id).endswith("@val0k")]
    assert sorted(set(numbers)) == list(range(k))  # each task's samples are numbered
    for index, record in enumerate(validations):
        mine = {task: rewards[index * k : (index + 1) * k] for task, rewards in sampled.items()}
        passing = {task: float(max(r) == 1.0) for task, r in mine.items()}
        means = {task: statistics.fmean(r) for task, r in mine.items()}
        assert record["val_k"] == k and record["val_pass_at_k_tasks"] == passing
        assert record["val_mean_at_k_tasks"] == pytest.approx(means)
        assert record["val_pass_at_k"] == statistics.fmean(passing.values())
        assert record["val_mean_at_k"] == pytest.approx(statistics.fmean(means.values()))
        assert record["val_pass_at_k_ci"] == list(bootstrap_interval(list(passing.values())))
        assert any(0 < m < 1 for m in means.values())  # a task's samples differ: sampled at a temperature
        assert record["val_pass_at_1"] == record["val_score"]  # greedy, and a reward of 0 or 1


def test_no_base_coverage_samples_only_the_validations_after_training_starts(tmp_path: Path) -> None:
    config = TrainerConfig(
        model="tiny-random",
        steps=0,
        n_workers=8,
        timeout_s=60,
        policy=TrainConfig(model="tiny-random", micro_batch_tokens=4096),
        coverage=CoverageConfig(k=2, at_start=False),
    )
    store = SQLiteStore(tmp_path / "store.db")
    Trainer(config, tmp_path / "run", store, TokenAuthority.generate()).fit(
        CallableAgent(sampling_agent), VAL[:2], VAL[:3], even_reply
    )
    before, after = [r for r in read_metrics(tmp_path / "run") if r["kind"] == "val"]
    assert "val_pass_at_1" in before and "val_k" not in before and "val_pass_at_k" not in before
    assert after["val_k"] == 2 and "val_pass_at_k" in after
    sampled = [r for r in store.list_rollouts(limit=1000) if str(r.group_id).endswith("@val0k")]
    assert len(sampled) == 2 * 3  # the validation after training only


def test_pass_at_k_is_the_unbiased_estimate_from_n_samples() -> None:
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 1, 4) == 1.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # C(3, 2) / C(5, 2) all failing pairs
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(2, 1, 3)
