"""Imitation before RL: the demonstration run's transitions (another model's calls, rendered with the
policy's chat template), grouped by rollout, and the batches an SFT update takes from them."""

from __future__ import annotations

import statistics
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from tether.adapters import Transition
from tether.adapters.build import ALL_ROWS
from tether.adapters.demonstrations import DemonstrationReport, NoDemonstrations, demonstrations_of
from tether.adapters.demonstrations import build_demonstrations as demonstrations_from
from tether.curriculum.cursor import TaskCursor
from tether.models.chat_template import ChatTemplate
from tether.store import Store, Task
from tether.store.records import Rollout, RolloutStatus
from tether.trainer.config import TrainerConfig

console = Console(stderr=True)


def demonstration_rollouts(
    store: Store,
    run: str,
    *,
    min_reward: float = 1.0,
    task_ids: Collection[str] | None = None,
    held_out: Collection[str] = (),
) -> list[Rollout]:
    """The rollouts of `run` fit to imitate (`tether.adapters.demonstrations.demonstrations_of`), read in
    one `read_rollouts`; NoDemonstrations names why there is none."""
    succeeded = store.list_rollouts(run=run, status=RolloutStatus.succeeded, limit=ALL_ROWS)
    if not succeeded and not store.list_rollouts(run=run, limit=1):
        known = ", ".join(store.list_runs()[-5:]) or "none"
        raise NoDemonstrations(f"run {run!r} has no rollouts (recent runs: {known})")
    records = store.read_rollouts([rollout.id for rollout in succeeded])
    chosen = demonstrations_of(run, records, min_reward=min_reward, task_ids=task_ids, held_out=held_out)
    return [record.rollout for record in chosen]


def build_demonstrations(
    store: Store, rollouts: Sequence[Rollout], template: ChatTemplate, **options: Any
) -> DemonstrationReport:
    """`tether.adapters.demonstrations.build_demonstrations` of the rollouts, read in one `read_rollouts`."""
    return demonstrations_from(store.read_rollouts([rollout.id for rollout in rollouts]), template, **options)


def demonstrated_rollouts(
    store: Store, config: TrainerConfig, train_tasks: Sequence[Task], val_tasks: Sequence[Task]
) -> list[Rollout]:
    """The `from_run` rollouts to imitate: successful ones of training tasks only, and none at all if the
    run holds a held-out task's (NoDemonstrations says why)."""
    assert config.from_run is not None
    return demonstration_rollouts(
        store,
        config.from_run,
        min_reward=config.sft_threshold,
        task_ids={task.id for task in train_tasks},
        held_out={task.id for task in val_tasks},
    )


def load_demonstrations(
    store: Store, config: TrainerConfig, train_tasks: Sequence[Task], val_tasks: Sequence[Task]
) -> list[list[Transition]]:
    """The demonstration run's transitions, grouped by rollout (`demonstrated_rollouts`)."""
    rollouts = demonstrated_rollouts(store, config, train_tasks, val_tasks)
    cache = Path(config.policy.cache_dir) if config.policy.cache_dir else None
    report = build_demonstrations(
        store,
        rollouts,
        ChatTemplate.for_model(config.model, cache),
        merge=config.merge,
        agents=config.agents,
        exclude_agents=tuple(config.fixed_agents),
    )
    console.print(f"demonstrations from run {config.from_run}: {report.summary()}")
    by_rollout: dict[str, list[Transition]] = {}
    for transition in report.transitions:
        by_rollout.setdefault(transition.rollout_id, []).append(transition)
    if not by_rollout:
        raise NoDemonstrations(f"run {config.from_run!r}: no call of its rollouts could be rendered")
    return list(by_rollout.values())


def demonstration_batch(
    demonstrations: TaskCursor[list[Transition]], size: int
) -> tuple[list[Transition], dict[str, Any]]:
    """The next `size` demonstrations, and the step stats an imitation update records."""
    picked = demonstrations.take(size)
    transitions = [t for rollout in picked for t in rollout]
    stats = {
        "phase": "sft",
        "reward_mean": statistics.fmean(rollout[0].reward for rollout in picked),
        "reward_std": 0.0,
        "rollouts": len(picked),
        "failed_rollouts": 0,
        "calls": sum(t.merged_calls for t in transitions),
        "merged_calls": sum(t.merged_calls - 1 for t in transitions),
        "merge_breaks": 0,
        "response_length": statistics.fmean(len(t.response_ids) for t in transitions),
        "rollout_seconds": 0.0,
        "rollouts_per_s": 0.0,
    }
    return transitions, stats
