"""Held-out coverage: what a policy solves when it samples, beside what it solves greedily.

RL after SFT sharpens what the policy already reaches: a task it solves in some of k samples (pass@k) but
not greedily (pass@1) is where RL can move the score. Each validation can also sample every held-out task
k times at a temperature and record, each with its 95% bootstrap interval over the tasks:
- pass@1: the share of tasks whose greedy rollout passes (its reward at least `pass_reward`);
- pass@k: the share of tasks with at least one passing sample among the k;
- mean@k: the mean reward of the k samples, averaged over the tasks.
Per-task values are kept, so two validations on the same tasks compare by a paired interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether.rewards.intervals import bootstrap_interval


@dataclass(frozen=True)
class CoverageConfig:
    k: int = 0  # samples of each held-out task; 0: greedy validation only
    temperature: float = 1.0
    pass_reward: float = 1.0  # a rollout passes when its reward is at least this
    # sample the validation before any training step too; off where another run (another seed of the same
    # base model) measures the base's coverage already
    at_start: bool = True

    def __post_init__(self) -> None:
        if self.k < 0:
            raise ValueError(f"--val-k must be >= 0 (0: greedy validation only), not {self.k}")
        if self.temperature <= 0:
            raise ValueError(
                f"--val-k-temperature must be above 0 (pass@k samples; the greedy pass is pass@1), "
                f"not {self.temperature}"
            )


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from n samples of which c passed: 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _scored(per_task: dict[str, float]) -> tuple[float, list[float]]:
    values = list(per_task.values())
    low, high = bootstrap_interval(values)
    return statistics.fmean(values), [low, high]


def greedy_record(rewards: Mapping[str, float], pass_reward: float) -> dict[str, Any]:
    """pass@1 of a greedy validation: the share of tasks whose reward reaches `pass_reward`."""
    passed = {task: float(r >= pass_reward) for task, r in rewards.items()}
    if not passed:
        return {}
    score, interval = _scored(passed)
    return {"val_pass_at_1": score, "val_pass_at_1_ci": interval}


def sampled_record(samples: Mapping[str, Sequence[float]], config: CoverageConfig) -> dict[str, Any]:
    """pass@k and mean@k of k samples per task, their intervals and per-task values."""
    if not samples:
        return {}
    passing = {
        task: pass_at_k(len(r), sum(v >= config.pass_reward for v in r), config.k)
        for task, r in samples.items()
    }
    means = {task: statistics.fmean(r) for task, r in samples.items()}
    pass_k, pass_k_ci = _scored(passing)
    mean_k, mean_k_ci = _scored(means)
    return {
        "val_k": config.k,
        "val_k_temperature": config.temperature,
        "val_pass_at_k": pass_k,
        "val_pass_at_k_ci": pass_k_ci,
        "val_mean_at_k": mean_k,
        "val_mean_at_k_ci": mean_k_ci,
        "val_pass_at_k_tasks": passing,
        "val_mean_at_k_tasks": means,
    }
