"""Async vs sync training wall-clock for the same number of updates, on an agent with slow tools.

    .venv/bin/python -m bench.async_vs_sync [--model tiny-random] [--steps 4] [--tool-latency 1.0]

The agent calls the model, then "runs a tool" (sleeps), then calls the model again. In sync mode every
update waits for the slowest rollout of its batch and agents sit idle during updates; in async mode
groups keep running while the trainer updates (pause, drain, swap, resume). Same tasks, same steps,
same group size; the ratio is sync time / async time.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path

import openai

from tether.learner.policy import TrainConfig
from tether.runner import CallableAgent
from tether.store import SQLiteStore, Task
from tether.store.auth import TokenAuthority
from tether.trainer.loop import Trainer, TrainerConfig


def make_agent(tool_latency: float) -> CallableAgent:
    async def agent(task: dict, llm) -> str:  # noqa: ANN001
        client = openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0)
        messages = [{"role": "user", "content": task["question"]}]
        first = await client.chat.completions.create(model=llm.model, messages=messages, max_tokens=8)
        # tool latency varies per call, so some rollouts of a batch are much slower than others
        await asyncio.sleep(tool_latency * random.uniform(0.2, 1.8))
        messages += [
            {"role": "assistant", "content": first.choices[0].message.content or ""},
            {"role": "user", "content": "tool result: 42"},
        ]
        second = await client.chat.completions.create(model=llm.model, messages=messages, max_tokens=8)
        return second.choices[0].message.content or ""

    return CallableAgent(agent)


def even_length(task: dict, output: str | None) -> float:
    return float(len(output or "") % 2 == 0)


def timed_fit(model: str, steps: int, tool_latency: float, async_mode: bool) -> float:
    folder = Path(tempfile.mkdtemp(prefix="tether-bench-"))
    config = TrainerConfig(
        model=model,
        steps=steps,
        group_size=4,
        tasks_per_step=2,
        n_workers=16,
        val_every=0,
        checkpoint_every=0,
        async_mode=async_mode,
        max_staleness=1,
        policy=TrainConfig(model=model, lr=1e-4),
    )
    tasks = [Task(id=f"t{i}", input={"question": f"Question {i}?"}) for i in range(16)]
    trainer = Trainer(config, folder / "run", SQLiteStore(folder / "store.db"), TokenAuthority.generate())
    started = time.perf_counter()
    trainer.fit(make_agent(tool_latency), tasks, [], even_length)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="tiny-random")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--tool-latency", type=float, default=1.0, help="mean seconds a tool call takes")
    args = parser.parse_args()
    random.seed(0)
    sync_s = timed_fit(args.model, args.steps, args.tool_latency, async_mode=False)
    async_s = timed_fit(args.model, args.steps, args.tool_latency, async_mode=True)
    print(f"| {args.steps} updates, {args.model}, tool latency ~{args.tool_latency:g}s | wall-clock |")
    print("|---|---|")
    print(f"| sync | {sync_s:.1f} s |")
    print(f"| async (max staleness 1) | {async_s:.1f} s |")
    print(f"| speed-up | {sync_s / async_s:.2f}x |")


if __name__ == "__main__":
    main()
