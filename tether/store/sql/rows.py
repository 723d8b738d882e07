"""The SQL stores' tables and their rows: the same columns in every dialect, JSON kept as text. A row is
anything indexed by column name (sqlite3.Row, psycopg dict rows)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import orjson

from tether.store.base import InvalidValue
from tether.store.records import Attempt, Resource, Reward, Rollout, RolloutRequest, Span

# In copy order (rollouts before what refers to them), each table's columns in the order rows are read in.
TABLES: dict[str, tuple[str, ...]] = {
    "tasks": ("id", "dataset", "input"),
    "rollouts": (
        "id", "task_id", "input", "mode", "group_id", "status", "max_attempts", "attempt_count",
        "created_at", "started_at", "ended_at", "output", "error", "metadata", "run", "key", "sample",
        "worker_losses",
    ),
    "attempts": (
        "rollout_id", "number", "worker_id", "status", "started_at", "heartbeat_at", "ended_at", "error",
    ),
    "spans": (
        "seq", "rollout_id", "attempt", "trace_id", "span_id", "parent_id", "name", "kind", "start_time",
        "end_time", "status", "status_message", "attributes", "events", "origin",
    ),
    "rewards": ("seq", "rollout_id", "attempt", "name", "value", "span_id", "source", "time", "is_primary"),
    "resources": ("name", "version", "kind", "value", "created_at"),
}  # fmt: skip
# Sequence numbers that only mean something in the store that gave them: inserts leave them out.
SEQUENCED = frozenset({"spans", "rewards"})
BATCH = 2000  # rows a copy reads at a time

Rows = list[tuple[Any, ...]]


def columns(table: str, keep_seq: bool = True) -> Sequence[str]:
    names = TABLES[table]
    return names if keep_seq or table not in SEQUENCED else names[1:]


def strip_seq(table: str, rows: Rows, keep_seq: bool) -> Rows:
    return rows if keep_seq or table not in SEQUENCED else [row[1:] for row in rows]


def names(table: str, keep_seq: bool = True) -> str:
    """The table's columns, comma-separated (`keep_seq=False`: those an INSERT names)."""
    return ", ".join(columns(table, keep_seq))


ROLLOUT_COLUMNS = names("rollouts")
ATTEMPT_COLUMNS = names("attempts")
SPAN_COLUMNS = names("spans")
RESOURCE_COLUMNS = names("resources")
REWARD_COLUMNS = names("rewards", keep_seq=False)

Params = Sequence[Any]


class Row(Protocol):
    def __getitem__(self, key: str) -> Any: ...


def dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError as exc:  # orjson.JSONEncodeError too: e.g. an integer beyond 64 bits
        raise InvalidValue(f"cannot store this value as JSON: {exc}") from None


def rollout(row: Row) -> Rollout:
    fields = {name: row[name] for name in TABLES["rollouts"]}
    fields.update(input=orjson.loads(fields["input"]), metadata=orjson.loads(fields["metadata"]))
    return Rollout(**fields)


def rollout_values(r: Rollout) -> tuple[Any, ...]:
    return (
        r.id, r.task_id, dumps(r.input), r.mode, r.group_id, r.status.value, r.max_attempts, r.attempt_count,
        r.created_at, r.started_at, r.ended_at, r.output, r.error, dumps(r.metadata), r.run, r.key, r.sample,
        r.worker_losses,
    )  # fmt: skip


def task_values(request: RolloutRequest) -> tuple[Any, ...]:
    return (request.task.id, request.task.dataset, dumps(request.task.input))


def attempt(row: Row) -> Attempt:
    return Attempt(**{name: row[name] for name in TABLES["attempts"]})


def span(row: Row) -> Span:
    fields = {name: row[name] for name in TABLES["spans"]}
    fields.update(attributes=orjson.loads(fields["attributes"]), events=orjson.loads(fields["events"]))
    return Span(**fields)


def span_values(s: Span) -> tuple[Any, ...]:
    """A span's columns, in the order INSERTs name them (no `seq`)."""
    return (
        s.rollout_id, s.attempt, s.trace_id, s.span_id, s.parent_id, s.name, s.kind, s.start_time, s.end_time,
        s.status, s.status_message, dumps(s.attributes), dumps([event.model_dump() for event in s.events]),
        s.origin,
    )  # fmt: skip


def reward(row: Row) -> Reward:
    fields = {name: row[name] for name in TABLES["rewards"][1:]}
    fields["primary"] = bool(fields.pop("is_primary"))
    return Reward(**fields)


def reward_values(r: Reward) -> tuple[Any, ...]:
    return (r.rollout_id, r.attempt, r.name, r.value, r.span_id, r.source, r.time, r.primary)


def resource(row: Row) -> Resource:
    fields = {name: row[name] for name in TABLES["resources"]}
    fields.update(value=orjson.loads(fields["value"]))
    return Resource(**fields)
