"""`SQLiteStore.query_rollouts` in SQL: one statement for the page, one capped count.

The reward column is the reward rule (`tether.store.reward_rule`) as a correlated subquery on the
`rewards_rollout` index: the last primary reward not linked to a span, of the rollout's last attempt or
of none, and not the agent's own unless the rollout lets agents' rewards count.
"""

from __future__ import annotations

from typing import Any

from tether.contracts import LLM_SPAN_PREFIX, CallAttr, Meta, Origin
from tether.store.records import RolloutPage, RolloutQuery, RolloutRow
from tether.store.sql import rows
from tether.store.sql.rows import TABLES

COLUMNS = ", ".join(f"r.{name}" for name in TABLES["rollouts"])
AGENT_REWARDS = f"$.{Meta.AGENT_REWARDS}"
REWARD = (
    "(SELECT w.value FROM rewards w WHERE w.rollout_id = r.id AND w.is_primary = 1 AND w.span_id IS NULL "
    "AND (w.attempt IS NULL OR w.attempt = NULLIF(r.attempt_count, 0)) "
    f"AND (w.source != '{Origin.AGENT}' OR CASE WHEN json_type(r.metadata, '{AGENT_REWARDS}') IS NULL "
    f"THEN 1 ELSE json_extract(r.metadata, '{AGENT_REWARDS}') END) "
    "ORDER BY w.seq DESC LIMIT 1)"
)
WORKER = "(SELECT a.worker_id FROM attempts a WHERE a.rollout_id = r.id ORDER BY a.number DESC LIMIT 1)"
HAS_WORKER = "EXISTS (SELECT 1 FROM attempts a WHERE a.rollout_id = r.id AND instr(a.worker_id, ?) > 0)"
HAS_AGENT = (
    "EXISTS (SELECT 1 FROM spans s WHERE s.rollout_id = r.id AND s.origin = ? AND "
    f"substr(s.name, 1, {len(LLM_SPAN_PREFIX)}) = ? AND json_extract(s.attributes, '$.{CallAttr.AGENT}') = ?)"
)


def _where(query: RolloutQuery) -> tuple[str, list[Any]]:
    where: list[str] = []
    params: list[Any] = []

    def add(clause: str, *values: Any) -> None:
        where.append(clause)
        params.extend(values)

    for column, value in (
        ("run", query.run),
        ("status", None if query.status is None else query.status.value),
        ("mode", query.mode),
        ("group_id", query.group_id),
    ):
        if value is not None:
            add(f"r.{column} = ?", value)
    if query.task:
        add("(instr(r.task_id, ?) > 0 OR instr(r.input, ?) > 0)", query.task, query.task)
    if query.worker:
        add(HAS_WORKER, query.worker)
    if query.agent:
        add(HAS_AGENT, Origin.GATEWAY, LLM_SPAN_PREFIX, query.agent)
    if query.reward_min is not None:
        add(f"{REWARD} >= ?", query.reward_min)
    if query.reward_max is not None:
        add(f"{REWARD} <= ?", query.reward_max)
    return (f"WHERE {' AND '.join(where)}" if where else ""), params


def page_sql(query: RolloutQuery) -> tuple[str, list[Any]]:
    clause, params = _where(query)
    order = "ASC" if query.oldest_first else "DESC"
    sql = (
        f"SELECT {COLUMNS}, {REWARD} AS reward, {WORKER} AS worker FROM rollouts r {clause} "
        f"ORDER BY r.created_at {order}, r.rowid {order} LIMIT ? OFFSET ?"
    )
    return sql, [*params, query.limit, query.offset]


def count_sql(query: RolloutQuery) -> tuple[str, list[Any]]:
    """How many match, counting at most `count_cap + 1` (one more says the cap was passed)."""
    clause, params = _where(query)
    sql = f"SELECT COUNT(*) AS n FROM (SELECT 1 FROM rollouts r {clause} LIMIT ?)"
    return sql, [*params, query.count_cap + 1]


def page(found: list[rows.Row], total: int, query: RolloutQuery) -> RolloutPage:
    """The page of `page_sql`'s rows, with `count_sql`'s total."""
    page = [
        RolloutRow(rollout=rows.rollout(row), reward=row["reward"], worker=row["worker"]) for row in found
    ]
    capped = total > query.count_cap
    return RolloutPage(rows=page, total=min(total, query.count_cap), total_capped=capped)
