"""Rows shared by the SQL backends (SQLite, PostgreSQL): JSON columns, spans to and from rows, and the
span filter of `query_spans`. A row is anything indexed by column name (sqlite3.Row, psycopg dict rows)."""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from tether.store.base import InvalidValue
from tether.store.models import Span, SpanEvent


class Row(Protocol):
    def __getitem__(self, key: str) -> Any: ...


def dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError as exc:  # orjson.JSONEncodeError too: e.g. an integer beyond 64 bits
        raise InvalidValue(f"cannot store this value as JSON: {exc}") from None


def span_of(row: Row) -> Span:
    return Span(
        seq=row["seq"],
        rollout_id=row["rollout_id"],
        attempt=row["attempt"],
        trace_id=row["trace_id"],
        span_id=row["span_id"],
        parent_id=row["parent_id"],
        name=row["name"],
        kind=row["kind"],
        start_time=row["start_time"],
        end_time=row["end_time"],
        status=row["status"],
        status_message=row["status_message"],
        attributes=orjson.loads(row["attributes"]),
        events=[SpanEvent(**event) for event in orjson.loads(row["events"])],
        origin=row["origin"],
    )


def span_values(span: Span) -> tuple[Any, ...]:
    """A span's columns, in the order the backends' INSERTs name them."""
    return (
        span.rollout_id,
        span.attempt,
        span.trace_id,
        span.span_id,
        span.parent_id,
        span.name,
        span.kind,
        span.start_time,
        span.end_time,
        span.status,
        span.status_message,
        dumps(span.attributes),
        dumps([event.model_dump() for event in span.events]),
        span.origin,
    )


def span_conditions(
    placeholder: str,
    *,
    rollout_id: str | None,
    attempt: int | None,
    name: str | None,
    since: float | None,
    until: float | None,
) -> tuple[str, list[Any]]:
    """`WHERE ...` (or nothing) and its parameters, for the filters given; `placeholder` is the driver's."""
    where: list[str] = []
    params: list[Any] = []
    for column, op, value in (
        ("rollout_id", "=", rollout_id),
        ("attempt", "=", attempt),
        ("name", "=", name),
        ("start_time", ">=", since),
        ("start_time", "<", until),
    ):
        if value is not None:
            where.append(f"{column} {op} {placeholder}")
            params.append(value)
    return (f"WHERE {' AND '.join(where)}" if where else ""), params
