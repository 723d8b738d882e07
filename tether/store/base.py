"""The interface every store offers: the local SQLite store and the HTTP client alike."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Protocol

from tether.store.records import (
    Attempt,
    Claim,
    Resource,
    Reward,
    Rollout,
    RolloutPage,
    RolloutQuery,
    RolloutRecord,
    RolloutRequest,
    RolloutStatus,
    Span,
)


class StoreError(Exception):
    """Base class of store errors."""


class NotFound(StoreError):
    def __init__(self, what: str, key: str) -> None:
        super().__init__(f"{what} {key!r} not found")
        self.what = what
        self.key = key


class InvalidTransition(StoreError):
    """A status change that the rollout's current state does not allow (e.g. from a finished state)."""


class InvalidValue(StoreError, ValueError):
    """A value the store cannot keep, e.g. JSON with an integer beyond 64 bits: the caller's mistake."""


class StoreAuthError(StoreError):
    """The store server refused the token: missing, invalid or expired (401), or out of its scope (403)."""

    def __init__(self, message: str, status: int = 401) -> None:
        super().__init__(message)
        self.status = status


class Store(Protocol):
    """Every backend implements this; the lifecycle rules live in `tether.store.lifecycle`, the reward
    rule in `tether.store.reward_rule`, and `tether.store.backends.open_store` picks a backend by URL."""

    # rollouts
    def enqueue(self, requests: Sequence[RolloutRequest]) -> list[Rollout]:
        """Queue new rollouts. A request whose (run, key) already exists gets the existing rollout back."""
        ...

    def claim(self, worker_id: str, run: str | None = None) -> Claim | None:
        """Atomically take the oldest queued rollout (of `run`, when given), open a new attempt on it,
        mark it running."""
        ...

    def heartbeat(self, rollout_id: str, attempt: int) -> None: ...

    def update_status(
        self,
        rollout_id: str,
        status: RolloutStatus,
        *,
        output: str | None = None,
        error: str | None = None,
        attempt: int | None = None,
    ) -> Rollout:
        """Move a rollout (and its current attempt) to a new status.

        A failed or timed-out attempt with attempts left sends the rollout back to the queue.
        """
        ...

    def start_session(
        self, input: dict[str, Any] | None = None, worker_id: str = "session", mode: str = "session"
    ) -> Claim:
        """Open a rollout that is already running (for agents run by hand, outside the runner)."""
        ...

    def get_rollout(self, rollout_id: str) -> Rollout: ...

    def list_rollouts(
        self,
        *,
        status: RolloutStatus | None = None,
        since: float | None = None,
        until: float | None = None,
        run: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Rollout]: ...

    def query_rollouts(self, query: RolloutQuery) -> RolloutPage:
        """A filtered page of rollouts with each one's reward and last worker, and how many match (see
        `RolloutQuery`). `tether.store.rollout_query.query_rollouts_by_scanning` answers it from the other
        methods, for a backend without a query of its own."""
        ...

    def list_runs(self) -> list[str]:
        """The names of the runs that have rollouts, oldest first."""
        ...

    def rename_run(self, run: str, new_name: str) -> int:
        """Move every rollout of `run` to `new_name` (archiving a run that starts over); returns how many."""
        ...

    def list_attempts(self, rollout_id: str) -> list[Attempt]: ...

    def wait_for(self, rollout_ids: Sequence[str], timeout: float | None = None) -> list[Rollout]:
        """Block until every given rollout is finished, or the timeout passes; returns the finished ones."""
        ...

    def abandon(self, rollout_id: str, attempt: int, reason: str) -> Rollout:
        """The worker of this running attempt is gone: time it out and requeue the rollout
        (`lifecycle.abandon_attempt`)."""
        ...

    def requeue_stale(self, heartbeat_timeout: float) -> list[str]:
        """Abandon every running attempt that stopped heartbeating; returns their rollout ids."""
        ...

    def rollouts_epoch(self) -> Hashable:
        """A value that changes whenever a rollout may have changed. A rollout read while it stays the
        same is still current, so readers on a hot path (the gateway) may cache rollouts under it."""
        ...

    # spans and rewards
    def add_spans(self, spans: Sequence[Span]) -> None: ...

    def query_spans(
        self,
        *,
        rollout_id: str | None = None,
        attempt: int | None = None,
        name: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 1000,
    ) -> list[Span]: ...

    def add_rewards(self, rewards: Sequence[Reward]) -> None: ...

    def query_rewards(self, rollout_id: str) -> list[Reward]: ...

    def read_rollouts(self, rollout_ids: Sequence[str]) -> list[RolloutRecord]:
        """Each rollout with its attempts, spans and rewards, in the order of `rollout_ids`, in a few
        batched reads instead of four per rollout. NotFound for an unknown id."""
        ...

    # resources
    def put_resource(self, name: str, kind: str, value: Any) -> Resource: ...

    def get_resource(self, name: str, version: int | None = None) -> Resource: ...

    def list_resources(self) -> list[Resource]: ...

    def close(self) -> None: ...
