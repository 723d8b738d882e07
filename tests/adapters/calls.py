"""Recorded model calls written the way the gateway writes them, for the transition tests."""

from __future__ import annotations

import itertools
from typing import Any

from tether.store import RolloutRequest, RolloutStatus, SQLiteStore, Task
from tether.store.records import Reward, Rollout, Span

_clock = itertools.count(1)
BASE_TIME = 1_700_000_000.0


def tick() -> float:
    """A strictly increasing time, so spans and rewards have a well-defined order."""
    return BASE_TIME + next(_clock)


def logprobs_for(ids: list[int]) -> list[float]:
    return [-0.5 - 0.01 * position for position in range(len(ids))]


def call_span(
    rollout_id: str,
    prompt_ids: list[int] | None,
    response_ids: list[int] | None,
    *,
    attempt: int | None = 1,
    agent: str = "policy",
    policy_version: int | None = 1,
    logprobs: list[float] | None | str = "auto",
    extra_choices: list[dict[str, Any]] | None = None,
    failed: bool = False,
    start_time: float | None = None,
) -> Span:
    start = tick() if start_time is None else start_time
    attributes: dict[str, Any] = {
        "call": "chat",
        "model": "policy",
        "agent": agent,
        "upstream": "policy",
        "stream": False,
        "latency_ms": 1.0,
        "request": {"model": "policy", "messages": []},
        "policy_version": policy_version,
    }
    if failed:
        attributes["error"] = {"message": "upstream failed", "type": "upstream_error"}
    else:
        choice_logprobs = logprobs
        if logprobs == "auto":
            choice_logprobs = None if response_ids is None else logprobs_for(response_ids)
        attributes.update(
            prompt_token_ids=prompt_ids,
            choices=[
                {
                    "index": 0,
                    "text": "reply",
                    "finish_reason": "stop",
                    "token_ids": response_ids,
                    "logprobs": choice_logprobs,
                },
                *(extra_choices or []),
            ],
            usage={},
            response={},
        )
    return Span(
        origin="gateway",
        rollout_id=rollout_id,
        attempt=attempt,
        name="llm.chat",
        kind="client",
        start_time=start,
        end_time=start + 0.1,
        status="error" if failed else "ok",
        attributes=attributes,
    )


def tool_span(rollout_id: str, *, attempt: int | None = 1, start_time: float | None = None) -> Span:
    start = tick() if start_time is None else start_time
    return Span(rollout_id=rollout_id, attempt=attempt, name="tool.search", start_time=start, end_time=start)


def reward(rollout_id: str, value: float, **fields: Any) -> Reward:
    return Reward(rollout_id=rollout_id, value=value, time=fields.pop("time", None) or tick(), **fields)


def running_rollout(store: SQLiteStore, *, group_id: str | None = None, mode: str = "train") -> Rollout:
    store.enqueue([RolloutRequest(task=Task(id="task-1", input={"q": 1}), group_id=group_id, mode=mode)])
    claim = store.claim("worker")
    assert claim is not None
    return claim.rollout


def retried_rollout(store: SQLiteStore) -> Rollout:
    """A rollout whose first attempt failed and whose second attempt is running."""
    store.enqueue([RolloutRequest(task=Task(input={}), max_attempts=2)])
    first = store.claim("worker")
    assert first is not None
    store.update_status(first.rollout.id, RolloutStatus.failed, error="crash", attempt=1)
    second = store.claim("worker")
    assert second is not None and second.attempt.number == 2
    return second.rollout
