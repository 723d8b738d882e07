"""The store's HTTP API: every `Store` method as a JSON route under `/store`, guarded by tokens.

The admin token may do everything. A rollout token may only read its own rollout (without the task's
`reference`, which is the evaluator's only), heartbeat it, add spans and rewards for it, and read
resources other than run records, and only until the rollout finishes. Errors are
OpenAI-shaped: `{"error": {"message", "type", "param", "code"}}`.
"""

import logging
from collections.abc import Callable, Sequence
from http import HTTPStatus
from typing import Annotated, Any

import anyio
import anyio.to_thread
import orjson
from fastapi import APIRouter, Depends, FastAPI, Query, Request, Response, Security
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from tether.auth import (
    DEAD,
    AuthError,
    Caller,
    Refusal,
    TokenAuthority,
    authenticate,
    check_live,
    find_rollout,
)
from tether.contracts import RUN_RESOURCE_KIND, agent_task
from tether.errors import APIError
from tether.limits import MAX_BODY_BYTES, MAX_STORED_JSON_DEPTH, BodyTooLarge, read_bounded, too_deep
from tether.store.base import InvalidTransition, InvalidValue, NotFound, Store, StoreAuthError, StoreError
from tether.store.models import (
    Attempt,
    Claim,
    Resource,
    Reward,
    Rollout,
    RolloutPage,
    RolloutQuery,
    RolloutRequest,
    RolloutStatus,
    Span,
    StatusUpdate,
)
from tether.store.provenance import agent_reward, agent_span

log = logging.getLogger(__name__)

MAX_WAIT_S = 60.0
# SQLite stores integers as signed 64-bit; larger ones would fail at bind time instead of validation.
SQLITE_INT_MAX = 2**63 - 1
SQLiteInt = Annotated[int, Field(ge=-SQLITE_INT_MAX - 1, le=SQLITE_INT_MAX)]
Limit = Annotated[int, Field(ge=0, le=SQLITE_INT_MAX)]


# -- request and error models -------------------------------------------------------------------------


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


class RequeueStaleRequest(BaseModel):
    heartbeat_timeout: float = Field(ge=0)


class SpansRequest(BaseModel):
    spans: list[SpanInput]


class RewardsRequest(BaseModel):
    rewards: list[RewardInput]


class ResourceBody(BaseModel):
    kind: str
    value: Any


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody


class StoreAPIError(APIError):
    """An error the store API answers with."""


def _error_response(
    status: int, message: str, type: str, code: str | None = None, param: str | None = None
) -> Response:
    return APIError(status, message, type=type, code=code, param=param).response()


# -- error handlers -----------------------------------------------------------------------------------


async def _api_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, StoreAPIError)
    return _error_response(exc.status, exc.message, exc.type, exc.code, exc.param)


async def _store_error(_: Request, exc: Exception) -> Response:
    if isinstance(exc, NotFound):
        code = exc.what.replace(" ", "_") + "_not_found"
        return _error_response(404, str(exc), "not_found_error", code, exc.key)
    if isinstance(exc, InvalidTransition):
        return _error_response(409, str(exc), "invalid_request_error", "invalid_transition")
    if isinstance(exc, InvalidValue):
        return _error_response(400, str(exc), "invalid_request_error", "invalid_value")
    if isinstance(exc, StoreAuthError):
        return _error_response(503, f"the backing store refused access: {exc}", "server_error", "store_auth")
    return _error_response(503, f"store unavailable: {exc}", "server_error", "store_unavailable")


def _location(loc: Sequence[Any]) -> str:
    return ".".join(str(part) for part in loc) or "request"


async def _validation_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    for error in errors:
        if error.get("type") == "json_invalid":
            detail = (error.get("ctx") or {}).get("error", "invalid JSON")
            message = f"malformed JSON body: {detail}"
            return _error_response(400, message, "invalid_request_error", "invalid_json")
    parts = [f"{_location(error.get('loc', ()))}: {error.get('msg', 'invalid')}" for error in errors[:5]]
    if len(errors) > 5:
        parts.append(f"... and {len(errors) - 5} more")
    param = _location(errors[0].get("loc", ())) if errors else None
    message = "invalid request: " + "; ".join(parts)
    return _error_response(400, message, "invalid_request_error", "invalid_request", param)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    from_router = exc.detail == HTTPStatus(exc.status_code).phrase
    if exc.status_code == 404 and from_router:
        message = f"no route {request.method} {request.url.path}"
        return _error_response(404, message, "not_found_error", "route_not_found")
    if exc.status_code == 405 and from_router:
        message = f"method {request.method} not allowed on {request.url.path}"
        return _error_response(405, message, "invalid_request_error", "method_not_allowed")
    error_type = "server_error" if exc.status_code >= 500 else "invalid_request_error"
    code = exc.code if isinstance(exc, _BodyRefused) else None
    response = _error_response(exc.status_code, str(exc.detail), error_type, code)
    response.headers.update(exc.headers or {})
    return response


async def _unexpected_error(request: Request, exc: Exception) -> Response:
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return _error_response(500, "internal server error", "server_error", "internal_error")


def install_store_error_handlers(app: FastAPI) -> None:
    """Make `app` answer store errors, validation errors and HTTP errors with OpenAI-style bodies."""
    app.add_exception_handler(StoreAPIError, _api_error)
    app.add_exception_handler(StoreError, _store_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)


# -- JSON parsing ---------------------------------------------------------------------------------------


class _StrictJSONRequest(Request):
    """Parses bodies with orjson, which rejects NaN/Infinity and lone surrogates that stdlib json lets in,
    and refuses bodies larger than MAX_BODY_BYTES or nested deeper than MAX_JSON_DEPTH."""

    async def body(self) -> bytes:
        if not hasattr(self, "_body"):
            try:
                self._body = await read_bounded(self, MAX_BODY_BYTES)
            except BodyTooLarge as exc:
                raise _BodyRefused(413, str(exc), "request_too_large") from None
        return self._body

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            raw = await self.body()
            parsed = orjson.loads(raw)
            if too_deep(raw, parsed, MAX_STORED_JSON_DEPTH):
                message = f"the JSON body nests deeper than {MAX_STORED_JSON_DEPTH} levels"
                raise _BodyRefused(400, message, "too_deep")
            self._json = parsed
        return self._json


class _BodyRefused(StarletteHTTPException):
    """Raised while FastAPI reads the body (it lets only HTTP exceptions through from there)."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(status, detail=message)
        self.code = code


class _StrictJSONRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            return await handler(_StrictJSONRequest(request.scope, request.receive))

        return strict_handler


# -- auth -----------------------------------------------------------------------------------------------


def _unauthorized(message: str, code: str) -> StoreAPIError:
    return StoreAPIError(401, message, type="authentication_error", code=code)


def _forbidden(message: str) -> StoreAPIError:
    return StoreAPIError(403, message, type="permission_error", code="forbidden")


def _refused(error: AuthError) -> StoreAPIError:
    refusal, rollout = error.refusal, error.rollout_id
    if refusal is Refusal.MISSING:
        return _unauthorized("missing token: send 'Authorization: Bearer <token>'", "missing_token")
    if refusal is Refusal.UNKNOWN_ROLLOUT:
        return _unauthorized(f"invalid token: rollout {rollout!r} does not exist", "invalid_token")
    if refusal in DEAD:
        return _unauthorized(f"token expired: {error.reason}", "token_expired")
    return _unauthorized("invalid token", "invalid_token")


def _authenticate(store: Store, auth: TokenAuthority, token: str | None) -> Caller:
    """The caller, for a live attempt's token or the admin token; blocks on a store read."""
    try:
        caller = authenticate(auth, token)
        if caller.rollout_id is not None:
            check_live(caller.rollout_id, find_rollout(store, caller.rollout_id), caller.attempt)
    except AuthError as exc:
        raise _refused(exc) from None
    return caller


def _require_admin(caller: Caller) -> None:
    if not caller.is_admin:
        raise _forbidden(
            "this route needs the admin token; a rollout token may only read its rollout, heartbeat it, "
            "add its spans and rewards, and read resources"
        )


def _as_seen_by(caller: Caller, rollout: Rollout) -> Rollout:
    """A rollout as the caller may read it: an agent's token never gets the task's reference."""
    return rollout if caller.is_admin else rollout.model_copy(update={"input": agent_task(rollout.input)})


def _readable(caller: Caller, resource: Resource) -> bool:
    return caller.is_admin or resource.kind != RUN_RESOURCE_KIND


def _require_rollout(caller: Caller, rollout_ids: Sequence[str]) -> None:
    if caller.is_admin:
        return
    others = sorted({rollout_id for rollout_id in rollout_ids if rollout_id != caller.rollout_id})
    if others:
        raise _forbidden(f"this token is scoped to rollout {caller.rollout_id!r}, not {', '.join(others)}")


def _require_attempt(caller: Caller, attempt: int) -> None:
    if not caller.is_admin and attempt != caller.attempt:
        raise _forbidden(f"this token is scoped to attempt {caller.attempt} of its rollout, not {attempt}")


# -- routes ---------------------------------------------------------------------------------------------

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": description}
    for status, description in (
        (400, "Malformed JSON or invalid request"),
        (401, "Missing, invalid or expired token"),
        (403, "Valid token outside its scope"),
        (404, "Unknown rollout, attempt or resource"),
        (409, "Status change the rollout's state does not allow"),
        (503, "The store database is unavailable"),
        # Documents every other error too, and keeps FastAPI from advertising its 422 body we never send.
        ("default", "Any other error"),
    )
}


def create_store_router(store: Store, auth: TokenAuthority, *, max_wait_s: float = MAX_WAIT_S) -> APIRouter:
    """All store routes, under `/store`. Include it in any app, then call `install_store_error_handlers`."""
    router = APIRouter(
        prefix="/store",
        tags=["store"],
        responses=ERROR_RESPONSES,
        route_class=_StrictJSONRoute,
        generate_unique_id_function=lambda route: f"store_{route.name}",
    )
    bearer = HTTPBearer(auto_error=False, description="The admin token, or a rollout's own token.")
    # Long-polls get their own thread budget so that many waiting clients cannot starve the other routes.
    wait_limiter = anyio.CapacityLimiter(64)

    def caller(credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]) -> Caller:
        return _authenticate(store, auth, credentials.credentials.strip() if credentials else None)

    def admin(who: Annotated[Caller, Depends(caller)]) -> Caller:
        _require_admin(who)
        return who

    Admin = Annotated[Caller, Depends(admin)]
    AnyCaller = Annotated[Caller, Depends(caller)]

    @router.post("/rollouts", summary="Enqueue rollouts")
    def enqueue(body: EnqueueRequest, _: Admin) -> list[Rollout]:
        return store.enqueue(body.requests)

    @router.post("/rollouts/claim", summary="Claim the oldest queued rollout (null when none)")
    def claim(body: ClaimRequest, _: Admin) -> Claim | None:
        return store.claim(body.worker_id, body.run)

    @router.post("/rollouts/wait", summary="Long-poll until the rollouts finish or the timeout passes")
    async def wait(body: WaitRequest, _: Admin) -> list[Rollout]:
        timeout = max_wait_s if body.timeout is None else min(body.timeout, max_wait_s)
        return await anyio.to_thread.run_sync(store.wait_for, body.rollout_ids, timeout, limiter=wait_limiter)

    @router.post("/requeue-stale", summary="Requeue (or fail) running rollouts that stopped heartbeating")
    def requeue_stale(body: RequeueStaleRequest, _: Admin) -> list[str]:
        return store.requeue_stale(body.heartbeat_timeout)

    @router.post("/sessions", summary="Open a rollout that is already running")
    def start_session(_: Admin, body: SessionRequest | None = None) -> Claim:
        body = body or SessionRequest()
        return store.start_session(body.input, body.worker_id, body.mode)

    @router.get("/rollouts", summary="List rollouts by status and creation time")
    def list_rollouts(
        _: Admin,
        status: RolloutStatus | None = None,
        since: float | None = None,
        until: float | None = None,
        run: str | None = None,
        limit: Annotated[Limit, Query()] = 100,
        offset: Annotated[Limit, Query()] = 0,
    ) -> list[Rollout]:
        return store.list_rollouts(
            status=status, since=since, until=until, run=run, limit=limit, offset=offset
        )

    @router.post("/rollouts/query", summary="A filtered page of rollouts, with rewards and a count")
    def query_rollouts(body: RolloutQuery, _: Admin) -> RolloutPage:
        return store.query_rollouts(body)

    @router.get("/runs", summary="The names of the runs that have rollouts")
    def list_runs(_: Admin) -> list[str]:
        return store.list_runs()

    @router.post("/runs/{run}/rename", summary="Move a run's rollouts to another run name")
    def rename_run(run: str, body: RenameRunRequest, _: Admin) -> int:
        return store.rename_run(run, body.new_name)

    @router.get("/rollouts/{rollout_id}", summary="Get a rollout")
    def get_rollout(rollout_id: str, who: AnyCaller) -> Rollout:
        _require_rollout(who, [rollout_id])
        return _as_seen_by(who, store.get_rollout(rollout_id))

    @router.get("/rollouts/{rollout_id}/attempts", summary="List a rollout's attempts")
    def list_attempts(rollout_id: str, _: Admin) -> list[Attempt]:
        return store.list_attempts(rollout_id)

    @router.post("/rollouts/{rollout_id}/status", summary="Move a rollout to a finished status")
    def update_status(rollout_id: str, body: StatusUpdateInput, _: Admin) -> Rollout:
        return store.update_status(
            rollout_id, body.status, output=body.output, error=body.error, attempt=body.attempt
        )

    @router.post("/rollouts/{rollout_id}/abandon", summary="Time out an attempt whose worker is gone")
    def abandon(rollout_id: str, body: AbandonRequest, _: Admin) -> Rollout:
        return store.abandon(rollout_id, body.attempt, body.reason)

    @router.post("/rollouts/{rollout_id}/heartbeat", status_code=204, summary="Heartbeat a running attempt")
    def heartbeat(rollout_id: str, body: HeartbeatRequest, who: AnyCaller) -> None:
        _require_rollout(who, [rollout_id])
        _require_attempt(who, body.attempt)
        store.heartbeat(rollout_id, body.attempt)

    @router.get("/rollouts/{rollout_id}/rewards", summary="List a rollout's rewards")
    def query_rewards(rollout_id: str, _: Admin) -> list[Reward]:
        return store.query_rewards(rollout_id)

    @router.post("/spans", status_code=204, summary="Add spans (duplicates are ignored)")
    def add_spans(body: SpansRequest, who: AnyCaller) -> None:
        _require_rollout(who, [span.rollout_id for span in body.spans])
        spans: list[Span] = list(body.spans)
        store.add_spans(spans if who.is_admin else [agent_span(span, who.attempt) for span in spans])

    @router.get("/spans", summary="Query spans in insertion order")
    def query_spans(
        _: Admin,
        rollout_id: str | None = None,
        attempt: Annotated[SQLiteInt | None, Query()] = None,
        name: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: Annotated[Limit, Query()] = 1000,
    ) -> list[Span]:
        return store.query_spans(
            rollout_id=rollout_id, attempt=attempt, name=name, since=since, until=until, limit=limit
        )

    @router.post("/rewards", status_code=204, summary="Add rewards")
    def add_rewards(body: RewardsRequest, who: AnyCaller) -> None:
        _require_rollout(who, [reward.rollout_id for reward in body.rewards])
        rewards: list[Reward] = list(body.rewards)
        store.add_rewards(
            rewards if who.is_admin else [agent_reward(reward, who.attempt) for reward in rewards]
        )

    @router.get("/resources", summary="Latest version of every resource")
    def list_resources(who: AnyCaller) -> list[Resource]:
        return [resource for resource in store.list_resources() if _readable(who, resource)]

    @router.put("/resources/{name:path}", summary="Store a new version of a resource")
    def put_resource(name: str, body: ResourceBody, _: Admin) -> Resource:
        return store.put_resource(name, body.kind, body.value)

    @router.get("/resources/{name:path}", summary="Get a resource (latest version unless one is given)")
    def get_resource(
        name: str, who: AnyCaller, version: Annotated[SQLiteInt | None, Query()] = None
    ) -> Resource:
        resource = store.get_resource(name, version)
        if not _readable(who, resource):
            raise _forbidden("run records are the operator's: reading one needs the admin token")
        return resource

    return router


def create_store_app(store: Store, auth: TokenAuthority, *, max_wait_s: float = MAX_WAIT_S) -> FastAPI:
    app = FastAPI(
        title="Tether store",
        description="Rollouts, attempts, spans, rewards and versioned resources over HTTP.",
        version="0.1.0",
    )
    app.include_router(create_store_router(store, auth, max_wait_s=max_wait_s))
    install_store_error_handlers(app)
    return app
