"""The store's data model: tasks, rollouts, attempts, spans, rewards and versioned resources.

These are pydantic models because they cross process boundaries (the HTTP store API, the gateway,
agents posting rewards). Times are UNIX seconds as floats.
"""

from __future__ import annotations

import time
import uuid
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def now() -> float:
    return time.time()


class RolloutStatus(StrEnum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    timed_out = "timed_out"
    cancelled = "cancelled"

    @property
    def finished(self) -> bool:
        return self in FINISHED_STATUSES


FINISHED_STATUSES = frozenset(
    {RolloutStatus.succeeded, RolloutStatus.failed, RolloutStatus.timed_out, RolloutStatus.cancelled}
)


class Task(BaseModel):
    """One input the agent is run on. `input` is whatever the agent needs (a question, a repo, ...)."""

    id: str = Field(default_factory=lambda: new_id("task"))
    input: dict[str, Any] = Field(default_factory=dict)
    dataset: str | None = None


class RolloutRequest(BaseModel):
    """What `enqueue` takes: a task plus how to run it."""

    task: Task
    mode: str = "train"
    group_id: str | None = None
    max_attempts: int = Field(default=1, ge=1)
    metadata: dict[str, Any] = Field(default_factory=dict)
    # The run it belongs to, and its key there: enqueueing a (run, key) that exists returns the existing
    # rollout instead of a new one, so a re-run resumes instead of duplicating.
    run: str | None = None
    key: str | None = None
    sample: int = Field(default=0, ge=0)  # which of the task's samples (a group's member)


class Rollout(BaseModel):
    id: str
    task_id: str
    input: dict[str, Any]
    mode: str = "train"
    group_id: str | None = None
    status: RolloutStatus = RolloutStatus.queued
    max_attempts: int = 1
    attempt_count: int = 0
    created_at: float
    started_at: float | None = None
    ended_at: float | None = None
    output: str | None = None
    error: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    run: str | None = None
    key: str | None = None
    sample: int = 0
    worker_losses: int = 0  # attempts whose worker died; they do not use up max_attempts


class Attempt(BaseModel):
    rollout_id: str
    number: int
    worker_id: str
    status: RolloutStatus = RolloutStatus.running
    started_at: float
    heartbeat_at: float
    ended_at: float | None = None
    error: str | None = None


class Claim(BaseModel):
    """A rollout handed to a worker, with the attempt just opened for it."""

    rollout: Rollout
    attempt: Attempt


class SpanEvent(BaseModel):
    name: str
    time: float
    attributes: dict[str, Any] = Field(default_factory=dict)


class Span(BaseModel):
    """An OpenTelemetry-shaped span, attributed to a rollout (and attempt, when known)."""

    rollout_id: str
    attempt: int | None = None
    trace_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    span_id: str = Field(default_factory=lambda: uuid.uuid4().hex[:16])
    parent_id: str | None = None
    name: str
    kind: str = "internal"
    start_time: float
    end_time: float | None = None
    status: str = "ok"
    status_message: str | None = None
    attributes: dict[str, Any] = Field(default_factory=dict)
    events: list[SpanEvent] = Field(default_factory=list)
    seq: int | None = None  # assigned by the store: insertion order within the store
    # Who recorded it: "gateway" for the model calls the gateway served itself (the only calls that
    # become training data), "agent" for whatever an agent sent (OTLP, the tracer, the store API).
    origin: str = "agent"


class Reward(BaseModel):
    rollout_id: str
    value: float
    name: str = "reward"
    attempt: int | None = None
    span_id: str | None = None
    source: str = "agent"
    time: float = Field(default_factory=now)
    primary: bool = True


class RolloutRecord(BaseModel):
    """A rollout with everything recorded for it (`Store.read_rollouts`): its attempts by number, its spans
    and rewards in store insertion order (as `list_attempts`, `query_spans` and `query_rewards` give)."""

    rollout: Rollout
    attempts: list[Attempt] = Field(default_factory=list)
    spans: list[Span] = Field(default_factory=list)
    rewards: list[Reward] = Field(default_factory=list)


class Resource(BaseModel):
    """A named, versioned value: a prompt template, a model endpoint, ..."""

    name: str
    kind: str
    version: int
    value: Any
    created_at: float


class StatusUpdate(BaseModel):
    status: RolloutStatus
    output: str | None = None
    error: str | None = None
    attempt: int | None = None


class RolloutQuery(BaseModel):
    """A filtered page of rollouts (`Store.query_rollouts`), newest first unless `oldest_first`.

    `task` matches a substring of the task id or of the task's input JSON; `worker` a substring of the
    worker id of any attempt; `agent` the agent name of any model call the gateway recorded. The reward
    bounds apply to the rollout's reward under the reward rule (`tether.store.reward_rule`); a rollout
    without a final reward matches no bound. `total` is counted up to `count_cap` (a page of a huge,
    selective filter stays cheap); past it `RolloutPage.total_capped` is set."""

    run: str | None = None
    status: RolloutStatus | None = None
    mode: str | None = None
    group_id: str | None = None
    task: str | None = None
    agent: str | None = None
    worker: str | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    limit: int = Field(default=50, ge=0, le=10_000)
    offset: int = Field(default=0, ge=0, le=2**63 - 1)
    oldest_first: bool = False
    count_cap: int = Field(default=10_000, ge=0, le=2**62)


class RolloutRow(BaseModel):
    """One row of a rollout page: the rollout, its reward under the reward rule and its last worker."""

    rollout: Rollout
    reward: float | None = None
    worker: str | None = None


class RolloutPage(BaseModel):
    rows: list[RolloutRow]
    total: int
    total_capped: bool = False
