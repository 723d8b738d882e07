"""Where a step's rollouts ran and how long its stages took, for the metrics log.

`nodes.NODE.rollouts`: rollouts whose last attempt ran on that node (a Ray node's label, else the host;
see `tether.runner.pool.worker_node`). `generation_seconds`: the wall time during which at least one of
the step's model calls was running (the union of their spans), beside `rollout_seconds` (the agents'
stage), `update_seconds` and `swap_seconds`.

The harness's price, per rollout (its last attempt, from the store's times, so for every kind of runner):
`startup_seconds`, from the attempt's start to its first model call (the interpreter, the imports, the
agent's set-up); `agent_seconds`, the rest of the attempt outside its model calls (the agent's own code,
its tools, the evaluator). Both are means over the step's rollouts. `agent_cpu_seconds`
(`agent_cpu_seconds()`) is what the agents' processes spent on the CPU in all, for local runners only.
"""

from __future__ import annotations

import resource
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from tether.contracts import is_call_span
from tether.runner.pool import worker_node
from tether.runner.warm import forked_cpu_seconds
from tether.store.records import RolloutRecord


def stage_stats_of(records: Iterable[RolloutRecord]) -> dict[str, Any]:
    """The step's stage times and nodes (see the module docstring) from its rollouts' records."""
    nodes: Counter[str] = Counter()
    intervals: list[tuple[float, float]] = []
    startups: list[float] = []
    outside: list[float] = []
    for record in records:
        last = max(record.attempts, key=lambda a: a.number) if record.attempts else None
        if last is not None:
            nodes[worker_node(last.worker_id)] += 1
        calls = [
            (span.start_time, span.end_time, span.attempt)
            for span in record.spans
            if is_call_span(span.name) and span.end_time is not None
        ]
        intervals += [(start, end) for start, end, _ in calls]
        if last is None or last.ended_at is None:
            continue
        own = [(start, end) for start, end, attempt in calls if attempt in (last.number, None)]
        startup = min(start for start, _ in own) - last.started_at if own else 0.0
        if own:
            startups.append(max(startup, 0.0))
        wall = last.ended_at - last.started_at
        outside.append(max(wall - covered_seconds(own) - max(startup, 0.0), 0.0))
    stats: dict[str, Any] = {"generation_seconds": covered_seconds(intervals)}
    if startups:
        stats["startup_seconds"] = statistics.fmean(startups)
    if outside:
        stats["agent_seconds"] = statistics.fmean(outside)
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


def agent_cpu_seconds() -> float:
    """The CPU seconds (user and system) this process's agents have used so far: its ended children's, as
    the OS counts them (cold agents with the children they waited for, and any evaluator subprocess), plus
    the warm agents' that their zygotes reported. Only agents run by this process's own workers count."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return children.ru_utime + children.ru_stime + forked_cpu_seconds()


def engine_counts(server: object) -> dict[str, int]:
    """The policy server's prompt-token counters now (`BuiltinPolicyServer.prefill_stats`), or none."""
    read = getattr(server, "prefill_stats", None)
    counts = read() if callable(read) else {}
    return {k: int(v) for k, v in counts.items() if k.endswith("_tokens")}


def engine_stats(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """`engine.prompt_tokens`, `engine.prefilled_tokens`, ...: what the engine did between two readings."""
    return {f"engine.{key}": after[key] - before.get(key, 0) for key in after}
