"""Rows of the PostgreSQL store's tables to the store's models and back. JSON is kept as text."""

from __future__ import annotations

from typing import Any

import orjson

from tether.store.codec import dumps
from tether.store.models import Attempt, Resource, Reward, Rollout, RolloutStatus

Row = dict[str, Any]

ROLLOUT_COLUMNS = (
    "id, task_id, input, mode, group_id, status, max_attempts, attempt_count, "
    "created_at, started_at, ended_at, output, error, metadata, run, key, sample, worker_losses"
)
ATTEMPT_COLUMNS = "rollout_id, number, worker_id, status, started_at, heartbeat_at, ended_at, error"
SPAN_COLUMNS = (
    "rollout_id, attempt, trace_id, span_id, parent_id, name, kind, start_time, end_time, "
    "status, status_message, attributes, events, origin"
)
REWARD_COLUMNS = "rollout_id, attempt, name, value, span_id, source, time, is_primary"
RESOURCE_COLUMNS = "name, version, kind, value, created_at"


def rollout(row: Row) -> Rollout:
    return Rollout(
        id=row["id"],
        task_id=row["task_id"],
        input=orjson.loads(row["input"]),
        mode=row["mode"],
        group_id=row["group_id"],
        status=RolloutStatus(row["status"]),
        max_attempts=row["max_attempts"],
        attempt_count=row["attempt_count"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        output=row["output"],
        error=row["error"],
        metadata=orjson.loads(row["metadata"]),
        run=row["run"],
        key=row["key"],
        sample=row["sample"],
        worker_losses=row["worker_losses"],
    )


def rollout_params(r: Rollout) -> tuple[Any, ...]:
    return (
        r.id,
        r.task_id,
        dumps(r.input),
        r.mode,
        r.group_id,
        r.status.value,
        r.max_attempts,
        r.attempt_count,
        r.created_at,
        r.started_at,
        r.ended_at,
        r.output,
        r.error,
        dumps(r.metadata),
        r.run,
        r.key,
        r.sample,
        r.worker_losses,
    )


def attempt(row: Row) -> Attempt:
    return Attempt(**{key: row[key] for key in ATTEMPT_COLUMNS.split(", ")})


def reward(row: Row) -> Reward:
    return Reward(
        rollout_id=row["rollout_id"],
        attempt=row["attempt"],
        name=row["name"],
        value=row["value"],
        span_id=row["span_id"],
        source=row["source"],
        time=row["time"],
        primary=row["is_primary"],
    )


def reward_params(r: Reward) -> tuple[Any, ...]:
    return (r.rollout_id, r.attempt, r.name, r.value, r.span_id, r.source, r.time, r.primary)


def resource(row: Row) -> Resource:
    return Resource(
        name=row["name"],
        kind=row["kind"],
        version=row["version"],
        value=orjson.loads(row["value"]),
        created_at=row["created_at"],
    )


def placeholders(columns: str) -> str:
    return ", ".join(["%s"] * len(columns.split(", ")))
