"""Held-out validation: every held-out task run greedily (pass@1, the score with its 95% bootstrap interval
and each task's reward, so that two validations pair by task) and, with coverage, sampled k times at a
temperature (pass@k, mean@k: `tether.trainer.coverage`)."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from tether.contracts import Meta
from tether.runner import Runner
from tether.runner.driver import RolloutOutcome
from tether.runner.rewards import RewardError
from tether.store import RolloutRequest, Store, Task
from tether.store.reward_rule import named_reward
from tether.trainer.config import TrainerConfig
from tether.trainer.coverage import greedy_record, sampled_record
from tether.trainer.metrics import MetricsLog

VAL_SAMPLES_LOGGED = 8  # rollouts of each validation in the W&B samples table


class Validator:
    """The validations of one run: `tasks` run by `runner`, each validation handed to `record` and its
    first rollouts to `log`'s samples table. `key` names a rollout within the run (resumable);
    `after_run` checks what the rollouts' calls asked for (the session's unrouted models)."""

    def __init__(
        self,
        config: TrainerConfig,
        tasks: Sequence[Task],
        runner: Runner,
        store: Store,
        record: Callable[[dict[str, Any]], None],
        log: MetricsLog,
        key: Callable[[str, str, int], str | None],
        after_run: Callable[[], None],
    ) -> None:
        self.config = config
        self.tasks = tasks
        self.runner = runner
        self.store = store
        self.record = record
        self.log = log
        self.key = key
        self.after_run = after_run

    async def validate(self, step: int, policy_version: int | None, before: bool = False) -> float | None:
        """One validation at `step` (`before`: the one before any training step), recorded."""
        if not self.tasks:
            return None
        started = time.monotonic()
        outcomes, rewards = await self._val_run(step, "", self.config.val_temperature, 1)
        score = statistics.fmean(rewards) if rewards else 0.0
        from tether.rewards.intervals import bootstrap_interval

        # The 95% bootstrap interval of the score, and each task's reward, so that two validations can
        # be compared task by task (tether.rewards.intervals.paired_difference_interval).
        low, high = await asyncio.to_thread(bootstrap_interval, rewards) if rewards else (score, score)
        by_task = {o.task_id: r for o, r in zip(outcomes, rewards, strict=True)}
        record = {
            "kind": "val",
            "step": step,
            "val_score": score,
            "val_ci_low": low,
            "val_ci_high": high,
            "val_rewards": by_task,
            "val_rollouts": len(rewards),
            "policy_version": policy_version,
            **await asyncio.to_thread(greedy_record, by_task, self.config.coverage.pass_reward),
        }
        coverage = self.config.coverage
        if coverage.k and (coverage.at_start or not before):
            record.update(await self._sampled_coverage(step))
        record["val_seconds"] = time.monotonic() - started
        self.record(record)
        rows = await asyncio.to_thread(sample_rows, self.store, outcomes[:VAL_SAMPLES_LOGGED])
        self.log.samples(step, rows)
        return score

    async def _sampled_coverage(self, step: int) -> dict[str, Any]:
        """pass@k and mean@k: each held-out task sampled k times at the coverage temperature."""
        coverage = self.config.coverage
        outcomes, rewards = await self._val_run(step, "k", coverage.temperature, coverage.k)
        samples: dict[str, list[float]] = {}
        for outcome, reward in zip(outcomes, rewards, strict=True):
            samples.setdefault(outcome.task_id, []).append(reward)
        return await asyncio.to_thread(sampled_record, samples, coverage)

    async def _val_run(
        self, step: int, tag: str, temperature: float, samples: int
    ) -> tuple[list[RolloutOutcome], list[float]]:
        """`samples` held-out rollouts of every task at `temperature` (group `TASK@valSTEP<tag>`), and
        their scores."""
        label = f"val{step}{tag}"
        overrides = {"temperature": temperature}
        requests = [
            RolloutRequest(
                task=task,
                mode="val",
                group_id=f"{task.id}@{label}",
                metadata={Meta.SAMPLING_OVERRIDES: overrides, Meta.STEP: step},
                key=self.key(label, task.id, sample),
                sample=sample,
            )
            for task in self.tasks
            for sample in range(samples)
        ]
        outcomes = await self.runner.run(requests)
        self.after_run()
        return outcomes, await self._val_rewards(outcomes)

    async def _val_rewards(self, outcomes: Sequence[RolloutOutcome]) -> list[float]:
        """Each held-out rollout's score: its reward, or the one named `val_reward`; 0.0 when it has none."""
        name = self.config.val_reward
        if name is None:
            return [o.reward if o.reward is not None else 0.0 for o in outcomes]
        store = self.store
        named = await asyncio.to_thread(lambda: [(o, store.query_rewards(o.rollout_id)) for o in outcomes])
        # An agent's own rewards never count here: it could report one under the name validation reads.
        values = [named_reward(found, o.attempts or None, name, agent_rewards=False) for o, found in named]
        if outcomes and all(v is None for v in values):
            seen = sorted({r.name for _, found in named for r in found if r.span_id is None})
            raise RewardError(
                f"--val-reward {name}: no held-out rollout has a reward named {name!r} (their rewards are "
                f"named {seen}); give --reward a source that records it"
            )
        return [v if v is not None else 0.0 for v in values]


def first_score(history: Sequence[dict[str, Any]]) -> float | None:
    """The score of a run's first validation (the one before training), from its records."""
    scores = [r["val_score"] for r in history if r.get("kind") == "val"]
    return scores[0] if scores else None


def sample_rows(store: Store, outcomes: Sequence[RolloutOutcome]) -> list[list[Any]]:
    """Rows of the validation samples table: rollout, task, input, output, reward, status."""
    rows = []
    for outcome in outcomes:
        rollout = store.get_rollout(outcome.rollout_id)
        task_input = orjson.dumps(rollout.input).decode()
        rows.append(
            [rollout.id, rollout.task_id, task_input, rollout.output, outcome.reward, outcome.status.value]
        )
    return rows
