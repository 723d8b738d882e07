"""The gateway: an OpenAI-compatible API that attributes and durably records every model call.

Agents get a base URL that names their rollout (`/rollouts/{id}/v1`) and an API key that is a token
scoped to that rollout. Each call is routed by model name to an upstream, and becomes one span in the
store with the exact prompt/response token ids, logprobs and the policy version that produced them.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from fastapi import Depends, FastAPI, Request
from pydantic import BaseModel, Field
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from tether.auth import TokenAuthority, bearer_token
from tether.gateway.admission import Admission
from tether.gateway.dialects import DIALECTS, Dialect, translated_stream
from tether.gateway.errors import GatewayError, UpstreamError, forbidden, unauthorized
from tether.gateway.prompts import apply_prompt_override
from tether.gateway.recorder import SpanRecorder
from tether.gateway.upstreams import CallKind, CallRecord, HTTPUpstream, HTTPUpstreamConfig, Upstream, sse
from tether.store.base import NotFound, Store, StoreError
from tether.store.models import Reward, Rollout, RolloutStatus, Span
from tether.store.server import create_store_router, install_store_error_handlers
from tether.tracing.otlp import create_otlp_router

DEFAULT_ROUTE = "*"
CALL_PREFIXES = ("/v1", "/rollouts/{rollout_id}/v1", "/rollouts/{rollout_id}/attempts/{attempt}/v1")
# The model-call routes of CALL_PREFIXES, matched by the fast path in front of FastAPI's router.
CALL_PATH = re.compile(
    r"/(?:rollouts/([^/]+)/(?:attempts/([0-9]{1,18})/)?)?v1/(chat/completions|completions|responses|messages)"
)
SAMPLING_OVERRIDES = "sampling_overrides"  # rollout metadata key
PROMPT_OVERRIDE = "prompt_override"  # rollout metadata key: a system prompt put in place of the agent's
TRACEPARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
MAX_BODY_BYTES = 8 * 1024 * 1024
ROLLOUT_CACHE_S = 1.0
ROLLOUT_CACHE_SIZE = 4096


_SPAN_NAMES: dict[str, str] = {"chat": "llm.chat", "completions": "llm.completions"}
_SPAN_FIELDS_SET = frozenset(
    {
        "rollout_id",
        "attempt",
        "name",
        "kind",
        "start_time",
        "end_time",
        "status",
        "status_message",
        "attributes",
    }
)
# What a model-call route serves: a chat or completions call, or another API translated to a chat call.
RouteKind = Literal["chat", "completions", "responses", "messages"]
_CALL_KINDS: dict[str, RouteKind] = {
    "chat/completions": "chat",
    "completions": "completions",
    "responses": "responses",
    "messages": "messages",
}


@dataclass
class CallContext:
    rollout_id: str
    attempt: int | None
    agent: str | None
    # Sampling parameters the run imposes on this rollout's calls (e.g. temperature 0 for validation).
    overrides: dict[str, Any] = field(default_factory=dict)
    # A candidate system prompt under evaluation (prompt optimization), applied to chat calls.
    prompt_override: Any = None
    # A call made in another API (`responses`, `messages`): its name and the request as the agent sent it.
    api: str | None = None
    api_request: dict[str, Any] | None = None
    # The agent's OpenTelemetry context (its `traceparent` header): the call's span joins that trace,
    # under the agent's span, which may name the agent (see `tether.adapters.build`).
    trace_id: str | None = None
    parent_span_id: str | None = None

    def join_trace(self, traceparent: str | None) -> None:
        match = TRACEPARENT.fullmatch(traceparent.strip().lower()) if traceparent else None
        if match is not None and match.group(1).strip("0") and match.group(2).strip("0"):
            self.trace_id, self.parent_span_id = match.group(1), match.group(2)


@dataclass
class GatewayConfig:
    routes: dict[str, str] = field(default_factory=lambda: {DEFAULT_ROUTE: "policy"})
    max_body_bytes: int = MAX_BODY_BYTES
    hold_limit_s: float = 300.0
    public_url: str = "http://127.0.0.1:8000"


class Gateway:
    def __init__(self, store: Store, auth: TokenAuthority, config: GatewayConfig | None = None) -> None:
        self.store = store
        self.auth = auth
        self.config = config or GatewayConfig()
        self.upstreams: dict[str, Upstream] = {}
        self.recorder = SpanRecorder(store)
        self._admission: Admission | None = None
        self._rollouts: dict[str, tuple[int, float, Rollout]] = {}

    @property
    def admission(self) -> Admission:
        # Created lazily so its asyncio events belong to the server's loop.
        if self._admission is None:
            self._admission = Admission(self.config.hold_limit_s)
        return self._admission

    def add_upstream(self, upstream: Upstream) -> None:
        self.upstreams[upstream.name] = upstream

    def base_url(self, rollout_id: str) -> str:
        return f"{self.config.public_url.rstrip('/')}/rollouts/{rollout_id}/v1"

    def credentials(self, rollout_id: str) -> dict[str, str]:
        return {
            "rollout_id": rollout_id,
            "base_url": self.base_url(rollout_id),
            "api_key": self.auth.rollout_token(rollout_id),
        }

    async def aclose(self) -> None:
        for upstream in self.upstreams.values():
            await upstream.aclose()
        self.recorder.close()

    # -- attribution ----------------------------------------------------------------------------------

    def authorize_call(
        self, request: Request, path_rollout: str | None, path_attempt: int | None
    ) -> CallContext:
        ctx = self.authorize(
            _request_token(request), request.headers.get("x-tether-agent"), path_rollout, path_attempt
        )
        ctx.join_trace(request.headers.get("traceparent"))
        return ctx

    def authorize(
        self, token: str | None, agent: str | None, path_rollout: str | None, path_attempt: int | None
    ) -> CallContext:
        if token is None:
            raise unauthorized("missing API key: send the rollout token as 'Authorization: Bearer <token>'")
        rollout_id = self.auth.rollout_of(token)
        if rollout_id is None:
            if not self.auth.is_admin(token):
                raise unauthorized("invalid API key: not a token issued by this Tether server")
            if path_rollout is None:
                raise GatewayError(400, "model calls must name a rollout: use the base URL /rollouts/{id}/v1")
            rollout_id = path_rollout
        elif path_rollout is not None and path_rollout != rollout_id:
            raise forbidden(f"this API key belongs to another rollout, not {path_rollout!r}")
        try:
            rollout = self._rollout(rollout_id)
        except NotFound:
            raise GatewayError(404, f"unknown rollout {rollout_id!r}", code="rollout_not_found") from None
        if rollout.status.finished:
            raise unauthorized(f"API key expired: rollout {rollout_id} is {rollout.status.value}")
        if rollout.status != RolloutStatus.running:
            raise GatewayError(
                409, f"rollout {rollout_id} is {rollout.status.value}, not running", code="conflict"
            )
        attempt = path_attempt if path_attempt is not None else rollout.attempt_count
        if attempt != rollout.attempt_count:
            raise GatewayError(
                409,
                f"attempt {attempt} of rollout {rollout_id} is over (current: {rollout.attempt_count})",
                code="stale_attempt",
            )
        overrides = rollout.metadata.get(SAMPLING_OVERRIDES) or {}
        return CallContext(rollout_id, attempt, agent, dict(overrides), rollout.metadata.get(PROMPT_OVERRIDE))

    def _rollout(self, rollout_id: str) -> Rollout:
        """The rollout, from a small cache that is valid while no rollout changed in this process's store
        (and for at most a second, to see changes made by other processes sharing the file)."""
        version = self.store.rollouts_epoch()
        now = time.monotonic()
        hit = self._rollouts.get(rollout_id)
        if hit is not None and version is not None and hit[0] == version and now - hit[1] < ROLLOUT_CACHE_S:
            return hit[2]
        rollout = self.store.get_rollout(rollout_id)
        if version is not None:
            if len(self._rollouts) >= ROLLOUT_CACHE_SIZE:
                self._rollouts.clear()
            self._rollouts[rollout_id] = (version, now, rollout)
        return rollout

    def route(self, model: Any) -> Upstream:
        if not isinstance(model, str) or not model:
            raise GatewayError(400, "'model' must be a non-empty string", param="model")
        name = self.config.routes.get(model, self.config.routes.get(DEFAULT_ROUTE))
        if name is None:
            known = ", ".join(sorted(k for k in self.config.routes if k != DEFAULT_ROUTE))
            raise GatewayError(
                404,
                f"the model {model!r} is not served here (known: {known})",
                code="model_not_found",
                param="model",
            )
        upstream = self.upstreams.get(name)
        if upstream is None:
            raise GatewayError(
                503,
                f"model {model!r} routes to upstream {name!r}, which is not registered",
                type="upstream_error",
                code="upstream_missing",
            )
        return upstream

    async def read_body(self, request: Request) -> dict[str, Any]:
        self.check_declared_length(request.headers.get("content-length"))
        raw = await request.body()
        if len(raw) > self.config.max_body_bytes:
            raise _too_large(self.config.max_body_bytes)
        return self.parse_body(raw)

    def check_declared_length(self, declared: str | None) -> None:
        if declared and declared.isdigit() and int(declared) > self.config.max_body_bytes:
            raise _too_large(self.config.max_body_bytes)

    @staticmethod
    def parse_body(raw: bytes) -> dict[str, Any]:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise GatewayError(400, f"the request body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise GatewayError(400, "the request body must be a JSON object")
        return body

    # -- recording ------------------------------------------------------------------------------------

    def _span(
        self,
        ctx: CallContext,
        kind: CallKind,
        body: dict[str, Any],
        upstream: Upstream,
        started: float,
        record: CallRecord | None,
        error: GatewayError | None = None,
    ) -> Span:
        ended = time.time()
        attributes: dict[str, Any] = {
            "call": kind,
            "model": body.get("model"),
            "agent": ctx.agent or body.get("model"),
            "agent_source": "header" if ctx.agent else "model",
            "upstream": upstream.name,
            "stream": bool(body.get("stream")),
            "latency_ms": round((ended - started) * 1000, 3),
            "request": body,
        }
        if ctx.api is not None:
            attributes.update(api=ctx.api, request=ctx.api_request, chat_request=body)
        if ctx.overrides:
            attributes["overrides"] = ctx.overrides
        if record is not None:
            attributes.update(
                policy_version=record.policy_version,
                prompt_token_ids=record.prompt_token_ids,
                choices=[
                    {
                        "index": c.index,
                        "text": c.text,
                        "finish_reason": c.finish_reason,
                        "token_ids": c.token_ids,
                        "logprobs": c.logprobs,
                        **({"tool_parse_error": c.tool_parse_error} if c.tool_parse_error else {}),
                    }
                    for c in record.choices
                ],
                usage=record.usage,
                response=_without_token_details(record.response),
            )
        if error is not None:
            attributes["error"] = error.body()["error"]
            attributes["policy_version"] = upstream.policy_version
        # Built without validation: every field comes from the gateway itself, on the hot path. Every
        # field is given, so that pydantic evaluates no default factory (it inspects their signatures).
        return Span.model_construct(
            set(_SPAN_FIELDS_SET),
            rollout_id=ctx.rollout_id,
            attempt=ctx.attempt,
            trace_id=ctx.trace_id or os.urandom(16).hex(),
            span_id=os.urandom(8).hex(),
            parent_id=ctx.parent_span_id,
            name=_SPAN_NAMES[kind],
            kind="client",
            start_time=started,
            end_time=ended,
            status="error" if error else "ok",
            status_message=error.message if error else None,
            attributes=attributes,
            events=[],
            seq=None,
        )

    async def record(self, span: Span) -> None:
        try:
            await self.recorder.record(span)
        except StoreError as exc:
            raise GatewayError(
                503, f"the call could not be recorded: {exc}", type="server_error", code="store_unavailable"
            ) from exc

    # -- model calls ----------------------------------------------------------------------------------

    async def handle_call(
        self, request: Request, kind: RouteKind, rollout_id: str | None = None, attempt: int | None = None
    ) -> Response:
        started = time.time()
        ctx = self.authorize_call(request, rollout_id, attempt)
        body = await self.read_body(request)
        answer = await self.dispatch(ctx, kind, body, started)
        if isinstance(answer, bytes):
            return Response(answer, media_type="application/json")
        return answer

    async def call(
        self, ctx: CallContext, kind: CallKind, body: dict[str, Any], started: float
    ) -> bytes | StreamingResponse:
        """Make an authorized call: the JSON answer, or the streaming response that relays it."""
        if ctx.overrides:
            body = {**body, **ctx.overrides}
        if ctx.prompt_override is not None and kind == "chat":
            body = apply_prompt_override(body, ctx.prompt_override)
        upstream = self.route(body.get("model"))
        if body.get("stream"):
            return await self._stream_call(ctx, kind, body, upstream, started)
        admission = self.admission
        await admission.acquire()
        try:
            try:
                record = await upstream.call(kind, body)
            except GatewayError as exc:
                await self._record_failure(ctx, kind, body, upstream, started, exc)
                raise
            await self.record(self._span(ctx, kind, body, upstream, started, record))
        finally:
            admission.release()
        return orjson.dumps(record.response)

    async def dispatch(
        self, ctx: CallContext, kind: RouteKind, body: dict[str, Any], started: float
    ) -> bytes | StreamingResponse:
        """A call on any model-call route: chat and completions as they are, other APIs translated."""
        dialect = DIALECTS.get(kind)
        if dialect is None:
            return await self.call(ctx, kind, body, started)  # type: ignore[arg-type]
        return await self.call_in_dialect(ctx, dialect, body, started)

    async def call_in_dialect(
        self, ctx: CallContext, dialect: Dialect, body: dict[str, Any], started: float
    ) -> bytes | StreamingResponse:
        """Make the call as a chat completion (so routing, admission, overrides and recording are the
        chat path's), and answer in the dialect."""
        chat = dialect.to_chat(body)
        ctx.api, ctx.api_request = dialect.api, body
        answer = await self.call(ctx, "chat", chat, started)
        if isinstance(answer, bytes):
            return orjson.dumps(dialect.from_chat(orjson.loads(answer), body))
        return _event_stream(translated_stream(dialect, answer.body_iterator, body))

    async def serve_call(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        kind: RouteKind,
        rollout_id: str | None,
        attempt: int | None,
    ) -> None:
        """The model-call routes as plain ASGI: what `handle_call` does behind FastAPI, minus its layers."""
        started = time.time()
        authorization = api_key = agent = declared = traceparent = None
        for name, value in scope["headers"]:  # the first of each, as Starlette's `headers.get`
            if name == b"authorization":
                if authorization is None:
                    authorization = value.decode("latin-1")
            elif name == b"x-api-key":
                if api_key is None:
                    api_key = value.decode("latin-1")
            elif name == b"x-tether-agent":
                if agent is None:
                    agent = value.decode("latin-1")
            elif name == b"traceparent":
                if traceparent is None:
                    traceparent = value.decode("latin-1")
            elif name == b"content-length" and declared is None:
                declared = value.decode("latin-1")
        try:
            ctx = self.authorize(bearer_token(authorization) or api_key, agent, rollout_id, attempt)
            ctx.join_trace(traceparent)
            self.check_declared_length(declared)
            raw = await _read_body(receive, self.config.max_body_bytes)
            if raw is None:  # the client went away
                return
            answer = await self.dispatch(ctx, kind, self.parse_body(raw), started)
        except GatewayError as exc:
            await error_response(kind, exc)(scope, receive, send)
            return
        if isinstance(answer, bytes):
            headers = [(b"content-length", str(len(answer)).encode()), (b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": answer})
        else:
            await answer(scope, receive, send)

    async def _record_failure(
        self,
        ctx: CallContext,
        kind: CallKind,
        body: dict[str, Any],
        upstream: Upstream,
        started: float,
        error: GatewayError,
    ) -> None:
        if isinstance(error, UpstreamError) or error.status >= 500:
            await self.record(self._span(ctx, kind, body, upstream, started, None, error))

    async def _stream_call(
        self, ctx: CallContext, kind: CallKind, body: dict[str, Any], upstream: Upstream, started: float
    ) -> Response:
        await self.admission.acquire()
        events = upstream.stream(kind, body)
        try:
            first = await anext(events)
        except GatewayError as exc:
            self.admission.release()
            await self._record_failure(ctx, kind, body, upstream, started, exc)
            raise
        except BaseException:
            self.admission.release()
            raise
        return _event_stream(self._relay(ctx, kind, body, upstream, started, first, events))

    async def _relay(
        self,
        ctx: CallContext,
        kind: CallKind,
        body: dict[str, Any],
        upstream: Upstream,
        started: float,
        first: bytes | CallRecord,
        events: AsyncIterator[bytes | CallRecord],
    ) -> AsyncIterator[bytes]:
        try:
            item = first
            while True:
                if isinstance(item, CallRecord):
                    # The call is on disk before the agent sees the end of the stream.
                    await self.record(self._span(ctx, kind, body, upstream, started, item))
                    yield b"data: [DONE]\n\n"
                    return
                yield item
                item = await anext(events)
        except GatewayError as exc:
            try:
                await self._record_failure(ctx, kind, body, upstream, started, exc)
            except GatewayError:
                pass
            yield sse(exc.body())
        finally:
            self.admission.release()
            await events.aclose()


def _event_stream(events: AsyncIterator[bytes]) -> StreamingResponse:
    """Server-sent events, unbuffered by proxies in between."""
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(events, media_type="text/event-stream", headers=headers)


def _without_token_details(response: dict[str, Any]) -> dict[str, Any]:
    """The response as recorded: token ids and logprobs live once, in the span's `choices`."""
    slim = {key: value for key, value in response.items() if key != "prompt_token_ids"}
    slim["choices"] = [
        {key: value for key, value in choice.items() if key not in ("logprobs", "token_ids")}
        for choice in response.get("choices") or []
    ]
    return slim


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The request body from ASGI messages; None if the client disconnected first."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size <= limit:
            chunks.append(chunk)
        else:
            chunks.clear()  # read to the end, keep nothing
        if not message.get("more_body", False):
            break
    if size > limit:
        raise _too_large(limit)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def error_response(kind: RouteKind, error: GatewayError) -> Response:
    """The error in the shape of the route's API (Anthropic's for `messages`, OpenAI's otherwise)."""
    dialect = DIALECTS.get(kind)
    return error.response() if dialect is None else dialect.error_response(error)


def _too_large(limit: int) -> GatewayError:
    return GatewayError(
        413, f"the request body is larger than the {limit // 1024} KiB limit", code="request_too_large"
    )


def _request_token(request: Request) -> str | None:
    return bearer_token(request.headers.get("authorization")) or request.headers.get("x-api-key")


# -- admin API ----------------------------------------------------------------------------------------


class PauseRequest(BaseModel):
    drain: bool = True
    timeout_s: float = Field(default=600.0, ge=0)


class RoutesUpdate(BaseModel):
    routes: dict[str, str]


class UpstreamRegistration(BaseModel):
    name: str = Field(min_length=1)
    base_url: str = Field(min_length=1)
    api_key: str | None = None
    model: str | None = None
    request_token_ids: bool = False
    request_logprobs: bool = True
    timeout_s: float = Field(default=600.0, gt=0)
    max_retries: int = Field(default=3, ge=0, le=10)
    policy_version: int | None = None


class SessionRequest(BaseModel):
    input: dict[str, Any] = Field(default_factory=dict)


class GatewayApp(FastAPI):
    """FastAPI for every route, with the model calls (the hot path) served before its middleware and
    router: they need neither, and skipping them is most of the gateway's own time per call. The
    routes stay registered with FastAPI for the OpenAPI schema, and serve what the fast path leaves
    (other methods, a root path)."""

    gateway: Gateway

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            match = CALL_PATH.fullmatch(scope["path"])
            if match is not None and not self.root_path:
                rollout_id, attempt, kind = match.groups()
                await self.gateway.serve_call(
                    scope,
                    receive,
                    send,
                    _CALL_KINDS[kind],
                    rollout_id,
                    None if attempt is None else int(attempt),
                )
                return
        await super().__call__(scope, receive, send)


def create_gateway_app(gateway: Gateway) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await gateway.aclose()

    app = GatewayApp(
        lifespan=lifespan,
        title="Tether gateway",
        description="OpenAI-compatible gateway that records every model call of a rollout, with token ids.",
        version="0.1.0",
    )
    app.state.gateway = gateway
    app.gateway = gateway

    @app.exception_handler(GatewayError)
    async def gateway_error(_: Request, exc: GatewayError) -> Response:
        return exc.response()

    _add_model_routes(app, gateway)
    _add_event_routes(app, gateway)
    _add_admin_routes(app, gateway)
    _add_store_routes(app, gateway)
    _add_unsupported_api_routes(app)

    @app.get("/healthz", tags=["meta"])
    async def healthz() -> dict[str, Any]:
        return {"ok": True, "upstreams": sorted(gateway.upstreams), "paused": gateway.admission.paused}

    return app


# The model-call routes under each of CALL_PREFIXES: path, kind, OpenAPI tag and summary.
_CALL_ROUTES: tuple[tuple[str, RouteKind, str, str], ...] = (
    ("/chat/completions", "chat", "openai", "Chat completions (OpenAI-compatible)"),
    ("/completions", "completions", "openai", "Completions (OpenAI-compatible)"),
    ("/responses", "responses", "openai", "Responses (OpenAI Responses API, function tools; stateless)"),
    ("/messages", "messages", "anthropic", "Messages (Anthropic Messages API, client tools)"),
)


def _add_model_routes(app: FastAPI, gateway: Gateway) -> None:
    for prefix in CALL_PREFIXES:
        for path, kind, tag, summary in _CALL_ROUTES:
            endpoint = _call_endpoint(gateway, kind)
            app.add_api_route(prefix + path, endpoint, methods=["POST"], tags=[tag], summary=summary)
        app.add_api_route(
            prefix + "/models",
            _models_endpoint(gateway),
            methods=["GET"],
            tags=["openai"],
            summary="Models the route map serves",
        )


def _add_unsupported_api_routes(app: FastAPI) -> None:
    """Any other path under a model-API prefix (embeddings, audio, files, ...): an OpenAI-style 404 that
    names the endpoint and what is served, instead of a bare "Not Found". Registered after every route."""
    served = ", ".join([path.lstrip("/") for path, *_ in _CALL_ROUTES] + ["models", "traces"])

    known = {path for path, *_ in _CALL_ROUTES} | {"/models", "/traces"}

    async def unsupported(request: Request, endpoint: str) -> Response:
        if "/" + endpoint in known:
            raise GatewayError(405, f"{request.method} is not allowed on {request.url.path}")
        raise GatewayError(
            404,
            f"{request.method} {request.url.path}: this endpoint is not supported by the Tether gateway "
            f"(it serves {served} under /v1)",
            code="unsupported_endpoint",
        )

    for prefix in CALL_PREFIXES:
        app.add_api_route(
            prefix + "/{endpoint:path}",
            unsupported,
            methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
            include_in_schema=False,
        )


def _call_endpoint(gateway: Gateway, kind: RouteKind):  # noqa: ANN202
    async def endpoint(
        request: Request, rollout_id: str | None = None, attempt: int | None = None
    ) -> Response:
        try:
            return await gateway.handle_call(request, kind, rollout_id, attempt)
        except GatewayError as exc:
            return error_response(kind, exc)

    endpoint.__name__ = f"{kind}_completions" if kind in ("chat", "completions") else kind
    return endpoint


def _models_endpoint(gateway: Gateway):  # noqa: ANN202
    async def models(request: Request, rollout_id: str | None = None) -> dict[str, Any]:
        token = _request_token(request)
        if not gateway.auth.is_admin(token):
            gateway.authorize(token, None, rollout_id, None)  # a rollout token: its own live rollout only
        names = sorted(
            {alias for alias in gateway.config.routes if alias != DEFAULT_ROUTE} | set(gateway.upstreams)
        )
        return {
            "object": "list",
            "data": [{"id": name, "object": "model", "created": 0, "owned_by": "tether"} for name in names],
        }

    return models


def _reward_from_event(body: dict[str, Any]) -> tuple[float, str, str | None]:
    """Accepts `{"value": 1}`, `{"reward": 1}` and `{"event_type": "reward", "data": {"value": 1}}`."""
    data = (
        body.get("data")
        if body.get("event_type") == "reward" and isinstance(body.get("data"), dict)
        else body
    )
    value = data.get("value", data.get("reward"))
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise GatewayError(400, "a reward event needs a numeric 'value' (or 'reward')", param="value")
    name = data.get("name", "reward")
    span_id = data.get("span_id")
    if not isinstance(name, str) or not name or (span_id is not None and not isinstance(span_id, str)):
        raise GatewayError(400, "'name' and 'span_id' must be strings", param="name")
    return float(value), name, span_id


def _add_event_routes(app: FastAPI, gateway: Gateway) -> None:
    async def post_reward(request: Request, rollout_id: str) -> dict[str, Any]:
        ctx = gateway.authorize_call(request, rollout_id, None)
        value, name, span_id = _reward_from_event(await gateway.read_body(request))
        primary = name == "reward" or bool(request.query_params.get("primary"))
        reward = Reward(
            rollout_id=ctx.rollout_id,
            attempt=ctx.attempt,
            value=value,
            name=name,
            span_id=span_id,
            source="agent",
            primary=primary,
        )
        await asyncio.to_thread(gateway.store.add_rewards, [reward])
        return {"recorded": True, "rollout_id": ctx.rollout_id, "name": name, "value": value}

    for path in ("/rollouts/{rollout_id}", "/rollouts/{rollout_id}/rewards"):
        app.add_api_route(
            path,
            post_reward,
            methods=["POST"],
            tags=["events"],
            summary="Record a reward for this rollout (the agent's own verdict)",
        )


def _require_admin(gateway: Gateway, request: Request) -> None:
    token = _request_token(request)
    if gateway.auth.is_admin(token):
        return
    if gateway.auth.rollout_of(token):
        raise forbidden("this route needs the admin token; a rollout token cannot use it")
    raise unauthorized("this route needs the admin token ('Authorization: Bearer <admin token>')")


def _add_admin_routes(app: FastAPI, gateway: Gateway) -> None:
    # A dependency, so the token is checked before the body is validated (no hints to a caller without one).
    def admin(request: Request) -> None:
        _require_admin(gateway, request)

    admin_only = [Depends(admin)]

    @app.post("/admin/pause", tags=["admin"], dependencies=admin_only)
    async def pause(body: PauseRequest | None = None) -> dict[str, Any]:
        body = body or PauseRequest()
        gateway.admission.pause()
        drained = await gateway.admission.drain(body.timeout_s) if body.drain else False
        return {"paused": True, "drained": drained, "in_flight": gateway.admission.in_flight}

    @app.post("/admin/resume", tags=["admin"], dependencies=admin_only)
    async def resume() -> dict[str, Any]:
        gateway.admission.resume()
        return {"paused": False}

    @app.get("/admin/status", tags=["admin"], dependencies=admin_only)
    async def status() -> dict[str, Any]:
        return {
            "paused": gateway.admission.paused,
            "in_flight": gateway.admission.in_flight,
            "waiting": gateway.admission.waiting,
            "routes": gateway.config.routes,
            "upstreams": {
                name: {"policy_version": u.policy_version} for name, u in gateway.upstreams.items()
            },
            "recorded_calls": gateway.recorder.recorded,
            "commits": gateway.recorder.batches,
        }

    @app.post("/admin/upstreams", tags=["admin"], dependencies=admin_only)
    async def register_upstream(body: UpstreamRegistration) -> dict[str, Any]:
        old = gateway.upstreams.get(body.name)
        gateway.add_upstream(HTTPUpstream(HTTPUpstreamConfig(**body.model_dump())))
        if old is not None:
            await old.aclose()
        return {"registered": body.name}

    @app.put("/admin/routes", tags=["admin"], dependencies=admin_only)
    async def set_routes(body: RoutesUpdate) -> dict[str, Any]:
        missing = sorted(set(body.routes.values()) - set(gateway.upstreams))
        if missing:
            raise GatewayError(
                400, f"routes name unregistered upstreams: {', '.join(missing)}", param="routes"
            )
        gateway.config.routes = dict(body.routes)
        return {"routes": gateway.config.routes}

    @app.post("/admin/sessions", tags=["admin"], dependencies=admin_only)
    async def open_session(body: SessionRequest | None = None) -> dict[str, str]:
        claim = gateway.store.start_session((body or SessionRequest()).input)
        return gateway.credentials(claim.rollout.id)

    @app.get("/admin/rollouts/{rollout_id}/credentials", tags=["admin"], dependencies=admin_only)
    async def credentials(rollout_id: str) -> dict[str, str]:
        try:
            gateway.store.get_rollout(rollout_id)
        except NotFound:
            raise GatewayError(404, f"unknown rollout {rollout_id!r}", code="rollout_not_found") from None
        return gateway.credentials(rollout_id)


def _add_store_routes(app: FastAPI, gateway: Gateway) -> None:
    app.include_router(create_store_router(gateway.store, gateway.auth))
    app.include_router(create_otlp_router(gateway.store, gateway.auth))
    install_store_error_handlers(app)
