"""`query_rollouts` for any store: a filtered, paged view of rollouts with each one's reward and worker.

Backends answer `Store.query_rollouts` in their own query language (SQLite: one indexed statement);
`query_rollouts_by_scanning` is the generic answer from the rest of the protocol, for a backend that has
no better one. It reads every rollout of the run, so it is only for small stores.
"""

from __future__ import annotations

import orjson

from tether.contracts import CallAttr, Origin, is_call_span
from tether.store.base import Store
from tether.store.records import Rollout, RolloutPage, RolloutQuery, RolloutRow
from tether.store.reward_rule import rollout_reward

SCAN_BATCH = 1000
ALL_SPANS = 1_000_000_000


def query_rollouts_by_scanning(store: Store, query: RolloutQuery) -> RolloutPage:
    matches: list[RolloutRow] = []
    offset = 0
    while True:
        batch = store.list_rollouts(status=query.status, run=query.run, limit=SCAN_BATCH, offset=offset)
        offset += len(batch)
        matches += [row for r in batch if (row := _row_if_matching(store, r, query)) is not None]
        if len(batch) < SCAN_BATCH:
            break
    if not query.oldest_first:
        matches.reverse()
    total = len(matches)
    capped = total > query.count_cap
    page = matches[query.offset : query.offset + query.limit]
    return RolloutPage(rows=page, total=min(total, query.count_cap), total_capped=capped)


def _row_if_matching(store: Store, rollout: Rollout, query: RolloutQuery) -> RolloutRow | None:
    if query.mode is not None and rollout.mode != query.mode:
        return None
    if query.group_id is not None and rollout.group_id != query.group_id:
        return None
    if query.task is not None and not _task_matches(rollout, query.task):
        return None
    attempts = store.list_attempts(rollout.id) if rollout.attempt_count else []
    if query.worker is not None and not any(query.worker in a.worker_id for a in attempts):
        return None
    if query.agent is not None and query.agent not in _agents(store, rollout.id):
        return None
    reward = rollout_reward(store, rollout)
    if query.reward_min is not None and (reward is None or reward < query.reward_min):
        return None
    if query.reward_max is not None and (reward is None or reward > query.reward_max):
        return None
    return RolloutRow(rollout=rollout, reward=reward, worker=attempts[-1].worker_id if attempts else None)


def _task_matches(rollout: Rollout, needle: str) -> bool:
    return needle in rollout.task_id or needle in orjson.dumps(rollout.input).decode()


def _agents(store: Store, rollout_id: str) -> set[str]:
    spans = store.query_spans(rollout_id=rollout_id, limit=ALL_SPANS)
    return {
        str(span.attributes.get(CallAttr.AGENT))
        for span in spans
        if is_call_span(span.name) and span.origin == Origin.GATEWAY
    }
