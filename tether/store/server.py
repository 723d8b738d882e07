"""The store's HTTP API: every `Store` method as a JSON route under `/store`, guarded by tokens.

The admin token may do everything. A rollout token may only read its own rollout (without the task's
`reference`, which is the evaluator's only, nor an earlier attempt's output or error), heartbeat it,
add spans and rewards for it, and read resources other than run records, and only until the rollout
finishes. Errors are OpenAI-shaped: `{"error": {"message", "type", "param", "code"}}`.
"""

import functools
import inspect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Annotated, Any

import anyio
import anyio.to_thread
import orjson
from fastapi import APIRouter, Depends, FastAPI, Query, Request, Response, Security
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from tether.contracts import OPERATOR_RESOURCE_KINDS, agent_task
from tether.errors import APIError
from tether.limits import MAX_BODY_BYTES, MAX_STORED_JSON_DEPTH, BodyTooLarge, read_bounded, too_deep
from tether.store.api import ROUTES, Route
from tether.store.auth import (
    DEAD,
    AuthError,
    Caller,
    Refusal,
    TokenAuthority,
    authenticate,
    check_live,
    find_rollout,
)
from tether.store.base import InvalidTransition, InvalidValue, NotFound, Store, StoreAuthError, StoreError
from tether.store.provenance import agent_reward, agent_span
from tether.store.records import Resource, Rollout, Span
from tether.store.span_quota import SpanLedger, SpanQuotaError

log = logging.getLogger(__name__)

MAX_WAIT_S = 60.0
# What a rollout token reads of its rollout beside the task: what was enqueued, and where its attempt stands.
AGENT_ROLLOUT_FIELDS = frozenset(
    {"id", "task_id", "mode", "group_id", "status", "max_attempts", "attempt_count", "created_at"}
    | {"started_at", "metadata", "run", "key", "sample", "worker_losses"}
)


# -- error models -----------------------------------------------------------------------------------------


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
    return exc.response()


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
    and refuses bodies larger than `max_body_bytes` or nested deeper than MAX_JSON_DEPTH."""

    max_body_bytes = MAX_BODY_BYTES

    async def body(self) -> bytes:
        if not hasattr(self, "_body"):
            try:
                self._body = await read_bounded(self, self.max_body_bytes)
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
    max_body_bytes = MAX_BODY_BYTES

    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()
        limit = self.max_body_bytes

        async def strict_handler(request: Request) -> Response:
            strict = _StrictJSONRequest(request.scope, request.receive)
            strict.max_body_bytes = limit
            return await handler(strict)

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


def _as_seen_by(caller: Caller, rollout: Rollout) -> Rollout:
    """A rollout as the caller may read it: an agent's token gets the task without its reference, and
    none of the rollout's outcome. A live token's rollout is running, so its `output`, `error` and
    `ended_at` can only be an earlier attempt's, and an evaluator's or judge's words on a wrong answer
    may quote the right one. Fields not in AGENT_ROLLOUT_FIELDS read as their defaults."""
    if caller.is_admin:
        return rollout
    return Rollout(**rollout.model_dump(include=set(AGENT_ROLLOUT_FIELDS)), input=agent_task(rollout.input))


def _readable(caller: Caller, resource: Resource) -> bool:
    return caller.is_admin or resource.kind not in OPERATOR_RESOURCE_KINDS


def _require_rollout(caller: Caller, rollout_ids: Sequence[str]) -> None:
    if caller.is_admin:
        return
    others = sorted({rollout_id for rollout_id in rollout_ids if rollout_id != caller.rollout_id})
    if others:
        raise _forbidden(f"this token is scoped to rollout {caller.rollout_id!r}, not {', '.join(others)}")


# -- routes ---------------------------------------------------------------------------------------------

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": description}
    for status, description in (
        (400, "Malformed JSON or invalid request"),
        (401, "Missing, invalid or expired token"),
        (403, "Valid token outside its scope"),
        (404, "Unknown rollout, attempt or resource"),
        (409, "Status change the rollout's state does not allow"),
        (413, "Request body, or spans in one request, larger than the limit"),
        (429, "The attempt's span quota is used up"),
        (503, "The store database is unavailable"),
        # Documents every other error too, and keeps FastAPI from advertising its 422 body we never send.
        ("default", "Any other error"),
    )
}


Arguments = dict[str, Any]


@dataclass(frozen=True)
class Rule:
    """What a route does beside calling the store: check (and adjust) the arguments for the caller, and
    show the caller what it may see of the answer."""

    check: Callable[[Caller, Arguments], None] = lambda who, arguments: None
    shown: Callable[[Caller, Any], Any] = lambda who, answer: answer


def _own_rollout(who: Caller, arguments: Arguments) -> None:
    _require_rollout(who, [arguments["rollout_id"]])


def _own_attempt(who: Caller, arguments: Arguments) -> None:
    _own_rollout(who, arguments)
    attempt = arguments["attempt"]
    if not who.is_admin and attempt != who.attempt:
        raise _forbidden(f"this token is scoped to attempt {who.attempt} of its rollout, not {attempt}")


def _own(key: str, stamp: Callable[[Any, int | None], Any]) -> Callable[[Caller, Arguments], None]:
    """A check of spans or rewards (`key`): the token's own rollout's, stamped as its agent's (`stamp`)."""

    def check(who: Caller, arguments: Arguments) -> None:
        items = list(arguments[key])
        _require_rollout(who, [item.rollout_id for item in items])
        arguments[key] = items if who.is_admin else [stamp(item, who.attempt) for item in items]

    return check


def _readable_one(who: Caller, resource: Resource) -> Resource:
    if not _readable(who, resource):
        raise _forbidden(f"{resource.kind} records are the operator's: reading one needs the admin token")
    return resource


def _rules(max_wait_s: float) -> dict[str, Rule]:
    def capped(_: Caller, arguments: Arguments) -> None:
        timeout = arguments["timeout"]
        arguments["timeout"] = max_wait_s if timeout is None else min(timeout, max_wait_s)

    return {
        "wait_for": Rule(check=capped),
        "get_rollout": Rule(check=_own_rollout, shown=_as_seen_by),
        "heartbeat": Rule(check=_own_attempt),
        "add_spans": Rule(check=_own("spans", agent_span)),
        "add_rewards": Rule(check=_own("rewards", agent_reward)),
        "list_resources": Rule(shown=lambda who, found: [r for r in found if _readable(who, r)]),
        "get_resource": Rule(shown=_readable_one),
    }


def _arguments(route: Route, received: Arguments) -> Arguments:
    """The store method's arguments, from the path, the body and the query."""
    arguments = {name: received[name] for name in route.segments}
    body = received.get("body")
    if body is None and route.body is not None and route.body_optional:
        body = route.body()
    if route.whole_body is not None:
        arguments[route.whole_body] = body
    elif body is not None:
        arguments.update(dict(body))
    arguments.update(dict(received.get("query") or {}))
    return arguments


def _parameters(route: Route, who: Any) -> list[inspect.Parameter]:
    """The endpoint's parameters, for FastAPI to read: path segments, body, query and the caller."""

    def parameter(name: str, annotation: Any, default: Any = inspect.Parameter.empty) -> inspect.Parameter:
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)

    found = [parameter(name, str) for name in route.segments]
    if route.body is not None and route.body_optional:
        found.append(parameter("body", route.body | None, None))
    elif route.body is not None:
        found.append(parameter("body", route.body))
    if route.query is not None:
        found.append(parameter("query", Annotated[route.query, Query()]))
    return [*found, parameter("who", who)]


def create_store_router(
    store: Store,
    auth: TokenAuthority,
    *,
    max_wait_s: float = MAX_WAIT_S,
    max_body_bytes: int = MAX_BODY_BYTES,
    spans: SpanLedger | None = None,
) -> APIRouter:
    """All store routes, under `/store`. Include it in any app, then call `install_store_error_handlers`.
    `spans`: the quota of spans a rollout token may add (shared with the app's other span routes)."""
    ledger = spans or SpanLedger(store)
    router = APIRouter(
        prefix="/store",
        tags=["store"],
        responses=ERROR_RESPONSES,
        route_class=type("_BoundedJSONRoute", (_StrictJSONRoute,), {"max_body_bytes": max_body_bytes}),
        generate_unique_id_function=lambda route: f"store_{route.name}",
    )
    bearer = HTTPBearer(auto_error=False, description="The admin token, or a rollout's own token.")
    # Long-polls get their own thread budget so that many waiting clients cannot starve the other routes.
    wait_limiter = anyio.CapacityLimiter(64)
    rules = _rules(max_wait_s)

    def caller(credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]) -> Caller:
        return _authenticate(store, auth, credentials.credentials.strip() if credentials else None)

    def admin(who: Annotated[Caller, Depends(caller)]) -> Caller:
        if not who.is_admin:
            raise _forbidden(
                "this route needs the admin token; a rollout token may only read its rollout, heartbeat "
                "it, add its spans and rewards, and read resources"
            )
        return who

    def endpoint(route: Route) -> Callable[..., Any]:
        rule = rules.get(route.method, Rule())
        limiter = wait_limiter if route.method == "wait_for" else None

        async def call(**received: Any) -> Any:
            who: Caller = received.pop("who")
            arguments = _arguments(route, received)
            rule.check(who, arguments)
            method = functools.partial(getattr(store, route.method), **arguments)
            if route.method == "add_spans":
                method = functools.partial(_charged, ledger, who, arguments["spans"])
            return rule.shown(who, await anyio.to_thread.run_sync(method, limiter=limiter))

        who = Annotated[Caller, Depends(admin if route.admin else caller)]
        call.__signature__ = inspect.Signature(_parameters(route, who))  # type: ignore[attr-defined]
        return call

    for route in ROUTES:
        router.add_api_route(
            route.path,
            endpoint(route),
            methods=[route.verb],
            name=route.name,
            summary=route.summary,
            status_code=route.status,
            response_model=route.answer,
        )
    return router


def _charged(ledger: SpanLedger, who: Caller, spans: Sequence[Span]) -> None:
    """Spans added through the API: an agent's once its attempt's quota takes them."""
    try:
        ledger.add_spans(who, spans)
    except SpanQuotaError as exc:
        raise StoreAPIError(exc.status, exc.message, type=exc.type, code=exc.code) from None


def create_store_app(store: Store, auth: TokenAuthority, *, max_wait_s: float = MAX_WAIT_S) -> FastAPI:
    app = FastAPI(
        title="Tether store",
        description="Rollouts, attempts, spans, rewards and versioned resources over HTTP.",
        version="0.1.0",
    )
    app.include_router(create_store_router(store, auth, max_wait_s=max_wait_s))
    install_store_error_handlers(app)
    return app
