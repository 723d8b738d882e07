"""The store's HTTP API as one table: each `Store` method's route, request and answer.

The server (`tether.store.server`) makes its routes from `ROUTES` and the client (`tether.store.client`)
its calls, so the two cannot drift apart. A method's arguments travel by name: path segments, then the
fields of its `body` model (POST, PUT) or of its `query` model (GET).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any
from urllib.parse import quote

from pydantic import BaseModel, Field, TypeAdapter

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
    StatusUpdate,
)

# SQLite stores integers as signed 64-bit; larger ones would fail at bind time instead of validation.
SQLITE_INT_MAX = 2**63 - 1
SQLiteInt = Annotated[int, Field(ge=-SQLITE_INT_MAX - 1, le=SQLITE_INT_MAX)]
Limit = Annotated[int, Field(ge=0, le=SQLITE_INT_MAX)]


# -- requests -------------------------------------------------------------------------------------------


class RolloutRequestInput(RolloutRequest):
    max_attempts: Annotated[int, Field(ge=1, le=SQLITE_INT_MAX)] = 1
    sample: Annotated[int, Field(ge=0, le=SQLITE_INT_MAX)] = 0


class SpanInput(Span):
    attempt: SQLiteInt | None = None


class RewardInput(Reward):
    attempt: SQLiteInt | None = None


class StatusUpdateInput(StatusUpdate):
    attempt: SQLiteInt | None = None


class EnqueueRequest(BaseModel):
    requests: list[RolloutRequestInput]


class ClaimRequest(BaseModel):
    worker_id: str
    run: str | None = None


class RenameRunRequest(BaseModel):
    new_name: str = Field(min_length=1)


class AbandonRequest(BaseModel):
    attempt: SQLiteInt
    reason: str = "worker lost"


class SessionRequest(BaseModel):
    input: dict[str, Any] | None = None
    worker_id: str = "session"
    mode: str = "session"


class HeartbeatRequest(BaseModel):
    attempt: SQLiteInt


class WaitRequest(BaseModel):
    rollout_ids: list[str]
    timeout: float | None = Field(default=None, ge=0, description="Seconds to wait; the server caps it.")


class ReadRolloutsRequest(BaseModel):
    rollout_ids: list[str]


class RequeueStaleRequest(BaseModel):
    heartbeat_timeout: float = Field(ge=0)


class SpansRequest(BaseModel):
    spans: list[SpanInput]


class RewardsRequest(BaseModel):
    rewards: list[RewardInput]


class ResourceBody(BaseModel):
    kind: str
    value: Any


class RolloutFilter(BaseModel):
    status: RolloutStatus | None = None
    since: float | None = None
    until: float | None = None
    run: str | None = None
    limit: Limit = 100
    offset: Limit = 0


class SpanFilter(BaseModel):
    rollout_id: str | None = None
    attempt: SQLiteInt | None = None
    name: str | None = None
    since: float | None = None
    until: float | None = None
    limit: Limit = 1000


class VersionFilter(BaseModel):
    version: SQLiteInt | None = None


# -- the table --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    method: str  # the `Store` method
    verb: str
    path: str  # under /store; `{name}` segments are the method's arguments (`{name:path}`: may hold /)
    summary: str
    answer: Any  # what the route answers; None: nothing (204)
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    whole_body: str | None = None  # the argument that is the whole body, instead of `body`'s fields
    body_optional: bool = False  # no body: the body model's defaults
    admin: bool = True  # only the admin token; else a rollout token too, within its scope
    operation: str = ""  # the OpenAPI operation id's name, when not the method's
    adapter: TypeAdapter[Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "adapter", TypeAdapter(self.answer))

    @property
    def name(self) -> str:
        return self.operation or self.method

    @property
    def status(self) -> int:
        return 200 if self.answer is not None else 204

    @property
    def segments(self) -> list[str]:
        return re.findall(r"{(\w+)(?::path)?}", self.path)

    def url(self, arguments: dict[str, Any]) -> str:
        """The route's path for these arguments, each segment quoted whole."""
        path = re.sub(r"{(\w+)(?::path)?}", lambda m: quote(str(arguments[m.group(1)]), safe=""), self.path)
        return f"/store{path}"


# In matching order. Rollout tokens (admin=False) are held to their own rollout by the server.
# fmt: off
ROUTES: tuple[Route, ...] = (
    Route("enqueue", "POST", "/rollouts", "Enqueue rollouts", list[Rollout], body=EnqueueRequest),
    Route("claim", "POST", "/rollouts/claim", "Claim the oldest queued rollout (null when none)",
          Claim | None, body=ClaimRequest),
    Route("wait_for", "POST", "/rollouts/wait", "Long-poll until the rollouts finish or the timeout passes",
          list[Rollout], body=WaitRequest, operation="wait"),
    Route("read_rollouts", "POST", "/rollouts/read",
          "Read rollouts with their attempts, spans and rewards", list[RolloutRecord],
          body=ReadRolloutsRequest),
    Route("requeue_stale", "POST", "/requeue-stale",
          "Requeue (or fail) running rollouts that stopped heartbeating", list[str],
          body=RequeueStaleRequest),
    Route("start_session", "POST", "/sessions", "Open a rollout that is already running", Claim,
          body=SessionRequest, body_optional=True),
    Route("list_rollouts", "GET", "/rollouts", "List rollouts by status and creation time", list[Rollout],
          query=RolloutFilter),
    Route("query_rollouts", "POST", "/rollouts/query",
          "A filtered page of rollouts, with rewards and a count", RolloutPage, body=RolloutQuery,
          whole_body="query"),
    Route("list_runs", "GET", "/runs", "The names of the runs that have rollouts", list[str]),
    Route("rename_run", "POST", "/runs/{run}/rename", "Move a run's rollouts to another run name", int,
          body=RenameRunRequest),
    Route("get_rollout", "GET", "/rollouts/{rollout_id}", "Get a rollout", Rollout, admin=False),
    Route("list_attempts", "GET", "/rollouts/{rollout_id}/attempts", "List a rollout's attempts",
          list[Attempt]),
    Route("update_status", "POST", "/rollouts/{rollout_id}/status", "Move a rollout to a finished status",
          Rollout, body=StatusUpdateInput),
    Route("abandon", "POST", "/rollouts/{rollout_id}/abandon", "Time out an attempt whose worker is gone",
          Rollout, body=AbandonRequest),
    Route("heartbeat", "POST", "/rollouts/{rollout_id}/heartbeat", "Heartbeat a running attempt", None,
          body=HeartbeatRequest, admin=False),
    Route("query_rewards", "GET", "/rollouts/{rollout_id}/rewards", "List a rollout's rewards", list[Reward]),
    Route("add_spans", "POST", "/spans", "Add spans (duplicates are ignored)", None, body=SpansRequest,
          admin=False),
    Route("query_spans", "GET", "/spans", "Query spans in insertion order", list[Span], query=SpanFilter),
    Route("add_rewards", "POST", "/rewards", "Add rewards", None, body=RewardsRequest, admin=False),
    Route("list_resources", "GET", "/resources", "Latest version of every resource", list[Resource],
          admin=False),
    Route("put_resource", "PUT", "/resources/{name:path}", "Store a new version of a resource", Resource,
          body=ResourceBody),
    Route("get_resource", "GET", "/resources/{name:path}",
          "Get a resource (latest version unless one is given)", Resource, query=VersionFilter, admin=False),
)
# fmt: on
BY_METHOD = {route.method: route for route in ROUTES}
