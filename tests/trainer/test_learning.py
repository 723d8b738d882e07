"""SmolLM2-135M learns: a short seeded GRPO run on single-digit sums raises its greedy accuracy.

The agent is an ordinary async OpenAI-client function; everything between it and the update is real.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import openai
import pytest

from tether.auth import TokenAuthority
from tether.runner import CallableAgent
from tether.store import SQLiteStore, Task
from tether.trainer.loop import Trainer, TrainerConfig
from tether.trainer.policy import TrainConfig

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


def sums(count: int, seed: int) -> list[Task]:
    rng = random.Random(seed)
    tasks = []
    for i in range(count):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        tasks.append(Task(id=f"sum{seed}-{i}", input={"question": f"What is {a} + {b}?", "answer": a + b}))
    return tasks


@pytest.mark.slow
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
    result = trainer.fit(CallableAgent(sum_agent), sums(40, seed=1), sums(24, seed=2), correct)
    print(f"held-out accuracy {result.val_before} -> {result.val_after}")
    assert result.val_before is not None and result.val_after is not None
    assert result.val_after > result.val_before, result.history
