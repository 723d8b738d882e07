"""SmolLM2-135M learns: a short seeded GRPO run on single-digit sums raises its greedy accuracy.

The agent is an ordinary async OpenAI-client function; everything between it and the update is real.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import openai
import pytest

from tether.learner.policy import TrainConfig
from tether.runner import CallableAgent
from tether.store import SQLiteStore, Task
from tether.store.auth import TokenAuthority
from tether.trainer.loop import Trainer, TrainerConfig

NUMBER = re.compile(r"-?\d+")


async def sum_agent(task: dict, llm) -> str:  # noqa: ANN001
    client = openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0)
    reply = await client.chat.completions.create(
        model=llm.model,
        messages=[{"role": "user", "content": task["question"]}],
        max_tokens=12,
        temperature=0.8,
    )
    numbers = NUMBER.findall(reply.choices[0].message.content or "")
    return numbers[-1] if numbers else ""


def correct(task: dict, output: str | None) -> float:
    return float(output == str(task["answer"]))


def sums(pairs: list[tuple[int, int]], name: str) -> list[Task]:
    return [
        Task(id=f"{name}-{i}", input={"question": f"What is {a} + {b}?", "answer": a + b})
        for i, (a, b) in enumerate(pairs)
    ]


def split_sums(train: int, val: int, seed: int) -> tuple[list[Task], list[Task]]:
    """Train and held-out sums of two digits from 1 to 9, no question in both."""
    pairs = [(a, b) for a in range(1, 10) for b in range(1, 10)]
    random.Random(seed).shuffle(pairs)
    return sums(pairs[val : val + train], "train"), sums(pairs[:val], "val")


@pytest.mark.smollm2
def test_grpo_raises_smollm2_accuracy_on_sums(tmp_path: Path) -> None:
    config = TrainerConfig(
        model="smollm2-135m",
        steps=6,
        group_size=8,
        tasks_per_step=2,
        n_workers=16,
        val_every=0,
        checkpoint_every=0,
        timeout_s=300,
        seed=0,
        policy=TrainConfig(model="smollm2-135m", lr=2e-4, seed=0),
    )
    trainer = Trainer(config, tmp_path / "run", SQLiteStore(tmp_path / "store.db"), TokenAuthority.generate())
    train, val = split_sums(40, 24, seed=1)
    asked = {task.input["question"] for task in train}
    assert len(val) == 24 and not asked & {task.input["question"] for task in val}
    result = trainer.fit(CallableAgent(sum_agent), train, val, correct)
    print(f"held-out accuracy {result.val_before} -> {result.val_after}")
    assert result.val_before is not None and result.val_after is not None
    assert result.val_after > result.val_before, result.history
