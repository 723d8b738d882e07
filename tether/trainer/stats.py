"""What a step's metrics record of its rollouts: groups with signal, calls per agent, stats merged over a
step's rounds; the group names of a step, and the memory an update gives back."""

from __future__ import annotations

import contextlib
import ctypes
import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

from tether.adapters import Transition, TransitionReport
from tether.runner.driver import NO_CALLS_HINT, RolloutOutcome
from tether.store import RolloutRequest, Task

SECONDS_KEYS = ("rollout_seconds", "generation_seconds", "idle_seconds", "agent_cpu_seconds")
SUMMED_KEYS = (
    "rollouts",
    "groups",
    "failed_rollouts",
    "calls",
    "merged_calls",
    "merge_breaks",
    "store_reads",
)


def rollout_stats(
    requests: Sequence[RolloutRequest],
    outcomes: Sequence[RolloutOutcome],
    report: TransitionReport,
    rewards: Sequence[float],
    seconds: float,
) -> dict[str, Any]:
    """A round of rollouts' metrics: rewards, counts, calls (merged, per agent), lengths, time."""
    return {
        "reward_mean": statistics.fmean(rewards) if rewards else 0.0,
        "reward_std": statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
        "rollouts": len(outcomes),
        "groups": len({request.group_id for request in requests}),
        "failed_rollouts": sum(o.status.value != "succeeded" for o in outcomes),
        "calls": report.calls,
        "merged_calls": report.merged,
        "merge_breaks": sum(report.merge_breaks.values()),
        "response_length": statistics.fmean(len(t.response_ids) for t in report.transitions)
        if report.transitions
        else 0.0,
        "rollout_seconds": seconds,
        "rollouts_per_s": len(outcomes) / max(seconds, 1e-9),
        **per_agent(report),
    }


def no_call_warning(silent: int, total: int, step: int, history: Sequence[dict[str, Any]]) -> str | None:
    """The run's one warning that rollouts made no model call (None: none did, or it was given)."""
    if not silent or any(record.get("rollouts_without_calls") for record in history):
        return None
    return f"step {step}: {silent} of {total} rollouts {NO_CALLS_HINT}"


def signal_groups(transitions: Sequence[Transition]) -> int:
    """Groups whose rollouts' rewards are not all equal: those an advantage can learn from."""
    rewards: dict[str | None, set[float]] = {}
    for t in transitions:
        rewards.setdefault(t.group_id, set()).add(t.reward)
    return sum(len(values) > 1 for values in rewards.values())


def group_tags(tasks: Sequence[Task]) -> list[str]:
    """A name per group of a step: the task's id, with ~K on its K-th repeat (a step that wraps around
    the task list, or asks for more tasks than there are, meets a task twice: two groups, not one)."""
    seen: Counter[str] = Counter()
    tags = []
    for task in tasks:
        tags.append(task.id if not seen[task.id] else f"{task.id}~{seen[task.id]}")
        seen[task.id] += 1
    return tags


def release_free_memory() -> None:
    """Give freed heap pages back to the OS after an update (glibc keeps them otherwise)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def merge_stats(parts: list[dict[str, Any]], sequential: bool) -> dict[str, Any]:
    """Counts add up, means are weighted by rollouts; stage times add up over sequential rounds, while of
    overlapping groups (async) the longest one's stands for the step."""
    rollouts = sum(p["rollouts"] for p in parts) or 1
    merged: dict[str, Any] = {}
    keys = dict.fromkeys(key for part in parts for key in part)  # per-node and per-agent keys may differ
    for key in keys:
        values = [p.get(key, 0) for p in parts]
        if key in SUMMED_KEYS or key.startswith(("nodes.", "agent.", "engine.")):
            merged[key] = sum(values)
        elif key in SECONDS_KEYS:
            merged[key] = sum(values) if sequential else max(values)
        else:
            merged[key] = sum(p.get(key, 0) * p["rollouts"] for p in parts) / rollouts
    return merged


def per_agent(report: TransitionReport) -> dict[str, int]:
    """Calls and transitions per agent name, for the metrics log (`agent.<name>.calls`, ...)."""
    transitions = Counter(str(t.agent) for t in report.transitions)
    stats: dict[str, int] = {}
    for agent in sorted(report.calls_by_agent):
        stats[f"agent.{agent}.calls"] = report.calls_by_agent[agent]
        stats[f"agent.{agent}.transitions"] = transitions[agent]
    return stats


def step_stats(
    transitions: Sequence[Transition], parts: list[dict[str, Any]], sequential: bool
) -> dict[str, Any]:
    """A step's metrics from its rounds of groups (`sequential`: one after another, in sync mode; else
    overlapping, in async mode), with dynamic sampling's counts and the harness's ratio."""
    stats = merge_stats(parts, sequential) if len(parts) > 1 else dict(parts[0])
    if stats.get("generation_seconds"):
        stats["harness_ratio"] = stats["rollout_seconds"] / stats["generation_seconds"]
    generated = sum(p["groups"] for p in parts)
    with_signal = signal_groups(transitions)
    stats.update(
        groups_generated=generated,
        groups_with_signal=with_signal,
        zero_variance_fraction=1 - with_signal / generated if generated else 0.0,
    )
    return stats
