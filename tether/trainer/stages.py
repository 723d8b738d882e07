"""Where a step's rollouts ran and how long its stages took, for the metrics log.

`nodes.NODE.rollouts`: rollouts whose last attempt ran on that node (a Ray node's label, else the host;
see `tether.runner.pool.worker_node`). `generation_seconds`: the wall time during which at least one of
the step's model calls was running (the union of their spans), beside `rollout_seconds` (the agents'
stage), `update_seconds` and `swap_seconds`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from tether.contracts import is_call_span
from tether.runner.pool import worker_node
from tether.store.base import Store

MAX_SPANS = 1_000_000


def stage_stats(store: Store, rollout_ids: Sequence[str]) -> dict[str, Any]:
    nodes: Counter[str] = Counter()
    intervals: list[tuple[float, float]] = []
    for rollout_id in rollout_ids:
        attempts = store.list_attempts(rollout_id)
        if attempts:
            nodes[worker_node(max(attempts, key=lambda a: a.number).worker_id)] += 1
        for span in store.query_spans(rollout_id=rollout_id, limit=MAX_SPANS):
            if is_call_span(span.name) and span.end_time is not None:
                intervals.append((span.start_time, span.end_time))
    stats: dict[str, Any] = {"generation_seconds": covered_seconds(intervals)}
    stats.update({f"nodes.{node}.rollouts": count for node, count in sorted(nodes.items())})
    return stats


def covered_seconds(intervals: Sequence[tuple[float, float]]) -> float:
    """The length of the union of the intervals."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total
