"""The whole loop on the tiny model: rollouts through the real gateway, updates, swaps, resume, async."""

from __future__ import annotations

import asyncio
import copy
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
import torch

from tether.curriculum.cursor import TaskCursor
from tether.learner.policy import PolicyTrainer, TrainConfig
from tether.runner import CallableAgent
from tether.store import SQLiteStore, Task
from tether.store.auth import TokenAuthority
from tether.store.records import RolloutRecord
from tether.trainer.loop import Trainer, TrainerConfig


async def chatty_agent(task: dict, llm) -> str:  # noqa: ANN001
    client = openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0)
    first = await client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": task["question"]}], max_tokens=6
    )
    text = first.choices[0].message.content or ""
    second = await client.chat.completions.create(
        model=llm.model,
        messages=[
            {"role": "user", "content": task["question"]},
            {"role": "assistant", "content": text},
            {"role": "user", "content": "More."},
        ],
        max_tokens=6,
    )
    return text + (second.choices[0].message.content or "")


def even_length(task: dict, output: str | None) -> float:
    """An arbitrary verdict that splits random text about in half, so groups have reward variance."""
    return float(len(output or "") % 2 == 0)


TASKS = [Task(id=f"t{i}", input={"question": f"Say something about {i}."}) for i in range(6)]


def make_trainer(tmp_path: Path, **overrides: object) -> Trainer:
    options = {
        "model": "tiny-random",
        "steps": 2,
        "group_size": 4,
        "tasks_per_step": 2,
        "n_workers": 8,
        "val_every": 1,
        "checkpoint_every": 1,
        "timeout_s": 60,
        "policy": TrainConfig(model="tiny-random", lr=5e-3, micro_batch_tokens=4096),
        **overrides,
    }
    store = SQLiteStore(tmp_path / "store.db")
    return Trainer(TrainerConfig(**options), tmp_path / "run", store, TokenAuthority.generate())


def test_sync_training_updates_serves_and_logs(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path)
    result = trainer.fit(CallableAgent(chatty_agent), TASKS, TASKS[:2], even_length)
    assert result.steps == 2 and result.val_before is not None and result.val_after is not None
    train = [r for r in result.history if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2]
    updated = [r for r in train if "train.loss" in r]
    assert updated, "no step had reward variance to learn from"
    assert all(r["calls"] == 16 for r in train)  # 8 rollouts x 2 calls
    # every call of a step was served by the version the previous update produced
    store = trainer.store
    versions = {r["step"]: r["policy_version"] for r in train}
    for rollout in store.list_rollouts(limit=1000):
        if rollout.mode == "train":
            spans = store.query_spans(rollout_id=rollout.id)
            assert {s.attributes["policy_version"] for s in spans} == {versions[rollout.metadata["step"] + 1]}
    lines = (tmp_path / "run" / "metrics.jsonl").read_bytes().splitlines()
    assert [orjson.loads(line)["kind"] for line in lines].count("val") == 3
    assert (tmp_path / "run" / "checkpoint").exists()
    # every policy version has its own folder, so a remote server can load N while serving N-1
    served = sorted(p.name for p in (tmp_path / "run" / "policies").iterdir())
    assert served == [f"v{r['policy_version_after']}" for r in updated]


def length_reward(task: dict, output: str | None) -> float:
    """Random answers differ in length: every group has reward variance, so every step updates."""
    return float(len(output or ""))


def learner_state(learner: PolicyTrainer) -> dict[str, Any]:
    """What a resume must bring back of the learner: weights, optimizer, schedule and its step count."""
    return copy.deepcopy(
        {
            "weights": learner.trainable(),
            "optimizer": learner.optimizer.state_dict(),
            "scheduler": learner.scheduler.state_dict(),
            "step_count": learner.step_count,
        }
    )


def assert_same(actual: Any, expected: Any, where: str = "state") -> None:
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor) and torch.equal(actual, expected), where
    elif isinstance(expected, dict):
        assert isinstance(actual, dict) and set(actual) == set(expected), where
        for key in expected:
            assert_same(actual[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, list | tuple):
        assert isinstance(actual, list | tuple) and len(actual) == len(expected), where
        for index, (left, right) in enumerate(zip(actual, expected, strict=True)):
            assert_same(left, right, f"{where}[{index}]")
    else:
        assert actual == expected, where


def train_rollouts(trainer: Trainer) -> list[tuple[int, str]]:
    """(step, task) of every training rollout in the trainer's store."""
    rollouts = trainer.store.list_rollouts(limit=1000)
    return sorted((r.metadata["step"], r.task_id) for r in rollouts if r.mode == "train")


def test_resume_continues_from_the_checkpoint(tmp_path: Path) -> None:
    """A run stopped at step 1's checkpoint and resumed is where the uninterrupted run was after step 1
    (weights, optimizer, step) and its step 2 takes the same tasks."""
    straight = make_trainer(tmp_path / "straight", tasks_per_step=3)
    straight.learner = straight_learner = PolicyTrainer(straight.config.policy)
    stopped = tmp_path / "stopped"
    after_step_1: dict[str, Any] = {}

    def watch(record: dict[str, Any]) -> None:
        if record["kind"] == "train" and record["step"] == 1:
            after_step_1.update(learner_state(straight_learner))
        if record["kind"] == "train" and record["step"] == 2:  # step 1's checkpoint is still on disk
            shutil.copytree(straight.run_dir / "checkpoint", stopped / "run" / "checkpoint")

    straight.on_step = watch
    straight.fit(CallableAgent(chatty_agent), TASKS, [], length_reward)
    assert "train.loss" in straight.history[0] and after_step_1["step_count"] == 1

    resumed = make_trainer(stopped, tasks_per_step=3)
    resumed.learner = resumed_learner = PolicyTrainer(resumed.config.policy)
    on_resume: dict[str, Any] = {}

    async def agent(task: dict, llm) -> str:  # noqa: ANN001
        if not on_resume:  # the first rollout after the restore, before any update
            on_resume.update(learner_state(resumed_learner))
        return await chatty_agent(task, llm)

    result = resumed.fit(CallableAgent(agent), TASKS, [], length_reward, resume=True)
    assert_same(on_resume, after_step_1)
    assert result.steps == 2
    assert [r["step"] for r in result.history if r["kind"] == "train"] == [1, 2]
    assert result.history[0] == straight.history[0]  # step 1 was not run again
    # only step 2 ran, on the tasks the uninterrupted run's step 2 had, served by version 1
    step_2 = [row for row in train_rollouts(straight) if row[0] == 1]
    assert train_rollouts(resumed) == step_2
    spans = [
        s for r in resumed.store.list_rollouts(limit=100) for s in resumed.store.query_spans(rollout_id=r.id)
    ]
    assert {s.attributes["policy_version"] for s in spans} == {1}


def test_async_training_loses_no_call_and_labels_versions(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path, async_mode=True, val_every=0, checkpoint_every=0, max_staleness=1)
    result = trainer.fit(CallableAgent(chatty_agent), TASKS, [], even_length)
    assert result.steps == 2
    store = trainer.store
    finished = [r for r in store.list_rollouts(limit=1000) if r.status.finished]
    assert finished and all(r.status.value in ("succeeded", "cancelled") for r in finished)
    for rollout in finished:
        if rollout.status.value == "succeeded":
            spans = store.query_spans(rollout_id=rollout.id)
            assert len(spans) == 2 and all(s.status == "ok" for s in spans)
            assert all(isinstance(s.attributes["policy_version"], int) for s in spans)
    train = [r for r in result.history if r["kind"] == "train"]
    assert all("stale_dropped" in r and "staleness_mean" in r for r in train)


def test_task_cursor_is_reproducible_and_covers_every_task() -> None:
    first = [t.id for t in TaskCursor(TASKS, seed=3).take(12)]
    again = TaskCursor(TASKS, seed=3, position=5).take(7)
    assert [t.id for t in again] == first[5:]
    assert sorted(first[:6]) == sorted(t.id for t in TASKS)


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="group-size"):
        TrainerConfig(group_size=1)
    with pytest.raises(ValueError, match="algorithm"):
        TrainerConfig(algorithm="magic")
    with pytest.raises(ValueError, match="LoRA adapters only"):
        TrainerConfig(model="tiny-random", policy=TrainConfig(model="tiny-random", lora=False))


def test_sft_trains_only_on_rewarded_rollouts(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path, algorithm="sft", steps=1, val_every=0, checkpoint_every=0)
    result = trainer.fit(CallableAgent(chatty_agent), TASKS, [], even_length)
    (record,) = [r for r in result.history if r["kind"] == "train"]
    rewarded = round(record["reward_mean"] * record["rollouts"])
    # one transition per rewarded rollout, or two where the second prompt did not extend the first
    assert rewarded > 0 and rewarded <= record["samples"] <= 2 * rewarded
    assert "train.loss" in record and record["policy_version_after"] == 1


def test_plot_draws_the_curves(tmp_path: Path) -> None:
    from tether.cli.main import main

    trainer = make_trainer(tmp_path, steps=1, val_every=0, checkpoint_every=0)
    trainer.fit(CallableAgent(chatty_agent), TASKS, TASKS[:2], even_length)
    assert main(["plot", str(tmp_path / "run"), "--out", str(tmp_path / "curve.png")]) == 0
    assert (tmp_path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit, match="no metrics"):
        main(["plot", str(tmp_path / "nowhere")])


async def two_role_agent(task: dict, llm) -> str:  # noqa: ANN001
    """A writer and a checker, told apart only by the model alias each asks for."""
    client = openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0)
    draft = await client.chat.completions.create(
        model="writer", messages=[{"role": "user", "content": task["question"]}], max_tokens=6
    )
    text = draft.choices[0].message.content or ""
    await client.chat.completions.create(
        model="checker", messages=[{"role": "user", "content": f"Check: {text}"}], max_tokens=4
    )
    return text


def test_multi_agent_run_trains_only_the_selected_agents(tmp_path: Path) -> None:
    trainer = make_trainer(
        tmp_path,
        steps=1,
        tasks_per_step=3,  # three groups: the chance that none has reward variance is 1/512
        val_every=0,
        checkpoint_every=0,
        agents=["writer"],
        fixed_agents={"checker": None},
    )
    result = trainer.fit(CallableAgent(two_role_agent), TASKS, TASKS[:1], even_length)
    [train] = [r for r in result.history if r["kind"] == "train"]
    assert train["agent.writer.calls"] == 12 and train["agent.checker.calls"] == 12
    assert train["agent.writer.transitions"] == 12 and train["agent.checker.transitions"] == 0
    spans = [
        s for r in trainer.store.list_rollouts(limit=100) for s in trainer.store.query_spans(rollout_id=r.id)
    ]
    upstream_of = {(s.attributes["agent"], s.attributes["upstream"]) for s in spans}
    assert upstream_of == {("writer", "policy"), ("checker", "base")}
    assert "train.loss" in train
    # after the update the writer is served by the new policy version; the checker's model never moves
    assert {s.attributes["policy_version"] for s in spans if s.attributes["agent"] == "checker"} == {0}
    assert {s.attributes["policy_version"] for s in spans if s.attributes["agent"] == "writer"} == {0, 1}


def test_an_agent_cannot_be_both_trained_and_fixed() -> None:
    with pytest.raises(ValueError, match="both trained and fixed: checker"):
        TrainerConfig(model="tiny-random", agents=["checker"], fixed_agents={"checker": None})


class ReadCountingStore(SQLiteStore):
    """The real store, remembering the ids each `read_rollouts` asked for."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.reads: list[list[str]] = []

    def read_rollouts(self, rollout_ids: Sequence[str]) -> list[RolloutRecord]:
        self.reads.append(list(rollout_ids))
        return super().read_rollouts(rollout_ids)


async def staggered_agent(task: dict, llm) -> str:  # noqa: ANN001
    """The chatty agent, its rollouts finishing at different times (half of them a second later)."""
    answer = await chatty_agent(task, llm)
    await asyncio.sleep(len(answer) % 2)
    return answer


def test_each_finished_rollout_is_read_once_and_a_step_counts_its_reads(tmp_path: Path) -> None:
    config = make_trainer(tmp_path, val_every=0).config
    store = ReadCountingStore(tmp_path / "counted.db")
    trainer = Trainer(config, tmp_path / "run", store, TokenAuthority.generate())
    result = trainer.fit(CallableAgent(staggered_agent), TASKS, [], even_length)
    train = [r for r in result.history if r["kind"] == "train"]
    read = [rollout_id for ids in store.reads for rollout_id in ids]
    assert sorted(read) == sorted(r.id for r in store.list_rollouts(limit=1000))  # each once, none twice
    assert sum(r["store_reads"] for r in train) == len(store.reads)
    assert all(r["store_reads"] == 1 for r in train)  # the step's rollouts, read once when the last finished


async def cached_agent(task: dict, llm) -> str:  # noqa: ANN001, ARG001
    """Answers from its own cache: it never calls the model."""
    return "an answer from the agent's own cache"


def test_rollouts_that_made_no_model_call_are_counted_and_warned_about_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trainer = make_trainer(tmp_path, val_every=0)
    result = trainer.fit(CallableAgent(cached_agent), TASKS, [], even_length)
    train = [r for r in result.history if r["kind"] == "train"]
    assert [r["rollouts_without_calls"] for r in train] == [r["rollouts"] for r in train] == [8, 8]
    assert all(r["calls"] == 0 and r["samples"] == 0 for r in train)  # nothing to train on
    warnings = [line for line in capsys.readouterr().err.splitlines() if "made no model call" in line]
    assert len(warnings) == 1 and warnings[0].startswith("step 1: 8 of 8 rollouts made no model call")
