"""The probe before RL (`--probe`): one group of every training task sampled from the policy as it stands
(after the SFT updates, or the base model), and not trained on.

The curriculum counts the probe's rollouts as this run's training rollouts before RL's first step, so RL
starts from what the policy already solves: with `--mixed-first` the first steps take the tasks whose
samples both pass and fail (the groups with signal), with `--retire-after` the group size the tasks every
sample solves are retired, and with `--park-after` those none solves are parked.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from tether.runner.driver import RolloutOutcome


def probe_record(outcomes: Sequence[RolloutOutcome], success: float) -> dict[str, Any]:
    """How many probed tasks every sample solved, some did (mixed: the ones with signal), none did."""
    by_task: dict[str, list[bool]] = defaultdict(list)
    for outcome in outcomes:
        reward = outcome.reward if outcome.reward is not None else 0.0
        by_task[outcome.task_id].append(reward >= success)
    solved = sum(all(s) for s in by_task.values())
    unsolved = sum(not any(s) for s in by_task.values())
    return {
        "probe_tasks": len(by_task),
        "probe_rollouts": len(outcomes),
        "probe_solved": solved,
        "probe_mixed": len(by_task) - solved - unsolved,
        "probe_unsolved": unsolved,
        "probe_pass_rate": sum(sum(s) for s in by_task.values()) / len(outcomes) if outcomes else 0.0,
    }


def probed(history: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a run (a resumed one included) has probed already: a "probe" record in its history."""
    return any(record.get("kind") == "probe" for record in history)
