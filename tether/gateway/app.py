"""The gateway: an OpenAI-compatible API that attributes and durably records every model call.

Agents get a base URL that names their rollout (`/rollouts/{id}/v1`) and an API key that is the token
of their attempt (`tether.store.auth`): a call is taken only while that attempt is the rollout's running one,
and is recorded as that attempt. Each call is routed by model name to an upstream, and becomes one span in the
store with the exact prompt/response token ids, logprobs and the policy version that produced them.

The model calls are the hot path: `Gateway.serve_call` answers them as plain ASGI, in front of FastAPI
(see `tether.gateway.asgi`); `tether.compose.create_app` builds the app with every other route.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from tether.contracts import DEFAULT_MAX_TOKENS_CAP, DEFAULT_N_CAP, DEFAULT_ROUTE, POLICY_UPSTREAM, Meta
from tether.gateway.admission import Admission
from tether.gateway.context import CallContext
from tether.gateway.dialects import DIALECTS, Dialect, translated_stream
from tether.gateway.dialects.common import close_quietly
from tether.gateway.errors import GatewayError, UpstreamError, forbidden, refused
from tether.gateway.metrics import GatewayMetrics
from tether.gateway.prompts import apply_prompt_override
from tether.gateway.recorder import SpanRecorder
from tether.gateway.request_checks import check_caps, check_depth
from tether.gateway.rollouts import RolloutCache
from tether.gateway.spans import call_span, refused_span
from tether.gateway.upstreams import CallKind, CallRecord, StreamAborted, Upstream, record_of_events, sse
from tether.limits import MAX_BODY_BYTES, AgentQuota, BodyTooLarge, read_bounded, too_large_message
from tether.store.auth import AuthError, Caller, TokenAuthority, authenticate, bearer_token
from tether.store.base import InvalidValue, Store, StoreError
from tether.store.records import Rollout, RolloutStatus, Span
from tether.store.span_quota import SpanLedger, SpanQuotaError, span_bytes

CALL_PREFIXES = ("/v1", "/rollouts/{rollout_id}/v1", "/rollouts/{rollout_id}/attempts/{attempt}/v1")
# What a model-call route serves: a chat or completions call, or another API translated to a chat call.
RouteKind = Literal["chat", "completions", "responses", "messages"]


@dataclass(frozen=True)
class CallRoute:
    path: str  # under each of CALL_PREFIXES
    kind: RouteKind
    tag: str  # OpenAPI
    summary: str


CALL_ROUTES = (
    CallRoute("/chat/completions", "chat", "openai", "Chat completions (OpenAI-compatible)"),
    CallRoute("/completions", "completions", "openai", "Completions (OpenAI-compatible)"),
    CallRoute(
        "/responses", "responses", "openai", "Responses (OpenAI Responses API, function tools; stateless)"
    ),
    CallRoute("/messages", "messages", "anthropic", "Messages (Anthropic Messages API, client tools)"),
)
# The model-call routes of CALL_PREFIXES: (rollout id, attempt, route path) of a request path.
CALL_PATH = re.compile(
    r"/(?:rollouts/([^/]+)/(?:attempts/([0-9]{1,18})/)?)?v1(/chat/completions|/completions|/responses|/messages)"
)
CALL_KINDS: dict[str, RouteKind] = {route.path: route.kind for route in CALL_ROUTES}
# The request headers a model call reads.
CALL_HEADERS = frozenset(
    {b"authorization", b"x-api-key", b"x-tether-agent", b"traceparent", b"content-length"}
)


@dataclass
class GatewayConfig:
    routes: dict[str, str] = field(default_factory=lambda: {DEFAULT_ROUTE: POLICY_UPSTREAM})
    max_body_bytes: int = MAX_BODY_BYTES
    hold_limit_s: float = 300.0
    public_url: str = "http://127.0.0.1:8000"
    # The most tokens (max_tokens, max_completion_tokens, max_output_tokens) and choices (n, best_of)
    # one call may ask for; above them a call is refused with a 400 (see `tether.gateway.request_checks`).
    max_tokens_cap: int = DEFAULT_MAX_TOKENS_CAP
    n_cap: int = DEFAULT_N_CAP
    # The spans an agent may send over its attempt (the store API, OTLP); its calls recorded here are
    # not counted. Its `max_request_bytes` is what `for_agents` sets `max_body_bytes` from.
    agent_quota: AgentQuota = field(default_factory=AgentQuota)

    @classmethod
    def for_agents(cls, quota: AgentQuota, **settings: Any) -> GatewayConfig:
        """A config whose body cap and span quota are `quota`'s."""
        return cls(max_body_bytes=quota.max_request_bytes, agent_quota=quota, **settings)


class Gateway:
    def __init__(self, store: Store, auth: TokenAuthority, config: GatewayConfig | None = None) -> None:
        self.store = store
        self.auth = auth
        self.config = config or GatewayConfig()
        self.upstreams: dict[str, Upstream] = {}
        self.recorder = SpanRecorder(store)
        self.span_ledger = SpanLedger(store, self.config.agent_quota)  # what agents send, not `recorder`
        self.rollouts = RolloutCache(store)
        self.metrics = GatewayMetrics()
        self.unrouted: Counter[str] = Counter()  # model names refused for want of a route, with counts
        self.session_calls: dict[str, float] = {}  # an open session's last model call (its idleness)
        self._admission: Admission | None = None

    @property
    def admission(self) -> Admission:
        # Created lazily so its asyncio events belong to the server's loop.
        if self._admission is None:
            self._admission = Admission(self.config.hold_limit_s)
        return self._admission

    async def pause(self, drain: bool = True, timeout_s: float | None = 600.0) -> dict[str, Any]:
        """Hold new model calls (they wait, up to the hold limit); with `drain`, wait for in-flight ones.
        Runs on the server's loop (`/admin/pause`, or `LocalStack.paused` from another thread)."""
        self.admission.pause()
        self.metrics.paused()
        drained = await self.admission.drain(timeout_s) if drain else False
        return {"paused": True, "drained": drained, "in_flight": self.admission.in_flight}

    async def resume(self) -> dict[str, Any]:
        self.admission.resume()
        self.metrics.resumed()
        return {"paused": False}

    def add_upstream(self, upstream: Upstream) -> None:
        self.upstreams[upstream.name] = upstream

    def credentials(self, rollout_id: str, attempt: int = 1) -> dict[str, str]:
        """What an agent of `attempt` (a session's is 1) needs: its rollout, base URL and token."""
        return {
            "rollout_id": rollout_id,
            "base_url": f"{self.config.public_url.rstrip('/')}/rollouts/{rollout_id}/v1",
            "api_key": self.auth.rollout_token(rollout_id, attempt),
        }

    async def aclose(self) -> None:
        for upstream in self.upstreams.values():
            await upstream.aclose()
        self.recorder.close()

    # -- attribution ----------------------------------------------------------------------------------

    async def authorize(
        self, token: str | None, agent: str | None, path_rollout: str | None, path_attempt: int | None
    ) -> CallContext:
        """The context of a call with `token` on a path naming `path_rollout` (and `path_attempt`). A
        rollout token's call is its attempt's, whatever the path says; the admin's, the path's attempt
        (by default the current one)."""
        caller, rollout = await self.live_rollout(token, path_rollout, path_attempt)
        attempt = caller.recorded_attempt(path_attempt, rollout.attempt_count)
        if rollout.status != RolloutStatus.running:
            raise GatewayError(
                409, f"rollout {rollout.id} is {rollout.status.value}, not running", code="conflict"
            )
        if attempt != rollout.attempt_count:
            raise GatewayError(
                409,
                f"attempt {attempt} of rollout {rollout.id} is over (current: {rollout.attempt_count})",
                code="stale_attempt",
            )
        if rollout.metadata.get(Meta.SESSION):
            self.session_calls[rollout.id] = time.time()
        overrides = rollout.metadata.get(Meta.SAMPLING_OVERRIDES)
        prompt_override = rollout.metadata.get(Meta.PROMPT_OVERRIDE)
        ctx = CallContext(rollout.id, attempt, agent, dict(overrides) if overrides else {}, prompt_override)
        ctx.upstream = rollout.metadata.get(Meta.UPSTREAM)
        return ctx

    async def live_rollout(
        self, token: str | None, path_rollout: str | None, path_attempt: int | None = None
    ) -> tuple[Caller, Rollout]:
        """Who calls, and the rollout they may call for: a rollout token's own, while its attempt is the
        running one; for the admin, the path's, while it is unfinished."""
        if self.auth.is_deploy(token) or self.auth.is_reward(token):
            raise forbidden(
                "the deploy and reward keys work on /sessions routes only: a session's model calls use "
                "the api_key that POST /sessions/open answers"
            )
        try:
            caller = authenticate(self.auth, token, path_rollout, path_attempt)
            rollout_id = caller.rollout_id or path_rollout
            if rollout_id is None:
                raise GatewayError(400, "model calls must name a rollout: use the base URL /rollouts/{id}/v1")
            return caller, await self.rollouts.live(rollout_id, caller.attempt)
        except AuthError as exc:
            raise refused(exc) from None

    def route(self, model: Any, policy_upstream: str | None = None) -> Upstream:
        """The upstream serving `model`; a policy call goes to `policy_upstream` while it is registered."""
        if not isinstance(model, str) or not model:
            raise GatewayError(400, "'model' must be a non-empty string", param="model")
        name = self.config.routes.get(model, self.config.routes.get(DEFAULT_ROUTE))
        if name is None:
            self.unrouted[model] += 1
            known = ", ".join(sorted(k for k in self.config.routes if k != DEFAULT_ROUTE))
            raise GatewayError(
                404,
                f"the model {model!r} is not served here (known: {known})",
                code="model_not_found",
                param="model",
            )
        if name == POLICY_UPSTREAM and policy_upstream in self.upstreams:
            name = policy_upstream
        upstream = self.upstreams.get(name)
        if upstream is None:
            raise GatewayError(
                503,
                f"model {model!r} routes to upstream {name!r}, which is not registered",
                type="upstream_error",
                code="upstream_missing",
            )
        return upstream

    # -- request bodies -------------------------------------------------------------------------------

    async def read_body(self, request: Request) -> dict[str, Any]:
        """A route's JSON body, refused once it is larger than the limit (not read whole first)."""
        limit = self.config.max_body_bytes
        try:
            return self.parse_body(await read_bounded(request, limit))
        except BodyTooLarge:
            raise _too_large(limit) from None

    @staticmethod
    def parse_body(raw: bytes) -> dict[str, Any]:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise GatewayError(400, f"the request body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise GatewayError(400, "the request body must be a JSON object")
        check_depth(raw, body)
        return body

    # -- recording ------------------------------------------------------------------------------------

    async def record(self, span: Span) -> None:
        try:
            await self.recorder.record(span)
            self.metrics.recorded(span)
        except InvalidValue as exc:
            raise GatewayError(400, f"the call could not be recorded: {exc}", code="unrecordable") from exc
        except StoreError as exc:
            raise GatewayError(
                503, f"the call could not be recorded: {exc}", type="server_error", code="store_unavailable"
            ) from exc

    async def record_failure(
        self,
        ctx: CallContext,
        kind: CallKind,
        body: dict[str, Any],
        upstream: Upstream,
        started: float,
        error: GatewayError,
        policy_version: int | None,
    ) -> None:
        if isinstance(error, UpstreamError) or error.status >= 500:
            await self.record(call_span(ctx, kind, body, upstream.name, started, error, policy_version))

    async def record_refusal(self, span: Span) -> None:
        """A refused call's span, charged to its attempt's span quota as what the agent sends is: an agent
        cannot grow the store by being refused. Past the quota, or with the store down, it is not kept
        (the refusal is answered either way)."""
        key, size = (span.rollout_id, span.attempt), span_bytes(span)
        try:
            await asyncio.to_thread(self.span_ledger.charge, key, 1, size)
        except SpanQuotaError:
            return
        try:
            await self.recorder.record(span)
        except (InvalidValue, StoreError):
            self.span_ledger.refund(key, 1, size)

    # -- model calls ----------------------------------------------------------------------------------

    async def serve_call(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        kind: RouteKind,
        rollout_id: str | None,
        attempt: int | None,
    ) -> None:
        """A model-call route, as plain ASGI: no middleware, no router, no request object."""
        started = time.time()
        ctx: CallContext | None = None
        body: dict[str, Any] | None = None
        found: dict[bytes, str] = {}
        for name, value in scope["headers"]:  # the first of each, as Starlette's `headers.get`
            if name in CALL_HEADERS and name not in found:
                found[name] = value.decode("latin-1")
        try:
            token = bearer_token(found.get(b"authorization")) or found.get(b"x-api-key")
            ctx = await self.authorize(token, found.get(b"x-tether-agent"), rollout_id, attempt)
            ctx.join_trace(found.get(b"traceparent"))
            declared = found.get(b"content-length")
            if declared and declared.isdigit() and int(declared) > self.config.max_body_bytes:
                raise _too_large(self.config.max_body_bytes)
            raw = await _read_body(receive, self.config.max_body_bytes)
            if raw is None:  # the client went away
                return
            body = self.parse_body(raw)
            ctx.lowered = check_caps(kind, body, self.config.max_tokens_cap, self.config.n_cap)
            answer = await self.dispatch(ctx, kind, body, started)
        except GatewayError as exc:
            self.metrics.refused(exc)
            if ctx is not None and body is not None and _kept_refusal(exc):
                await self.record_refusal(refused_span(ctx, kind, body, started, exc))
            await error_response(kind, exc)(scope, receive, send)
            return
        if isinstance(answer, bytes):
            headers = [(b"content-length", str(len(answer)).encode()), (b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": answer})
        else:
            await send_events(answer, receive, send)

    def dispatch(
        self, ctx: CallContext, kind: RouteKind, body: dict[str, Any], started: float
    ) -> Coroutine[Any, Any, bytes | AsyncIterator[bytes]]:
        """A call on any model-call route: chat and completions as they are, other APIs translated. The
        answer is JSON, or the server-sent events of a stream. (Not a coroutine of its own: one frame
        less to resume at every step of every call.)"""
        if kind == "chat" or kind == "completions":
            return self.call(ctx, kind, body, started)
        return self.call_in_dialect(ctx, DIALECTS[kind], body, started)

    async def call_in_dialect(
        self, ctx: CallContext, dialect: Dialect, body: dict[str, Any], started: float
    ) -> bytes | AsyncIterator[bytes]:
        """Make the call as a chat completion (so routing, admission, overrides and recording are the
        chat path's), and answer in the dialect."""
        chat = dialect.to_chat(body)
        ctx.api, ctx.api_request = dialect.api, body
        answer = await self.call(ctx, "chat", chat, started)
        if isinstance(answer, bytes):
            return orjson.dumps(dialect.from_chat(orjson.loads(answer), body))
        return translated_stream(dialect, answer, body)

    async def call(
        self, ctx: CallContext, kind: CallKind, body: dict[str, Any], started: float
    ) -> bytes | AsyncIterator[bytes]:
        """Make an authorized call: the JSON answer, or the events that relay its stream."""
        if ctx.overrides:
            body = {**body, **ctx.overrides}
        if ctx.prompt_override is not None and kind == "chat":
            body = apply_prompt_override(body, ctx.prompt_override)
        upstream = self.route(body.get("model"), ctx.upstream)
        if body.get("stream"):
            return await self._stream_call(ctx, kind, body, upstream, started)
        admission = self.admission
        await admission.acquire()
        try:
            version = upstream.policy_version  # what this call is sent with, should it fail
            try:
                record = await upstream.call(kind, body, owner=ctx.rollout_id)
            except GatewayError as exc:
                await self.record_failure(ctx, kind, body, upstream, started, exc, version)
                raise
            await self.record(call_span(ctx, kind, body, upstream.name, started, record))
        finally:
            admission.release()
        return orjson.dumps(record.response)

    async def _stream_call(
        self, ctx: CallContext, kind: CallKind, body: dict[str, Any], upstream: Upstream, started: float
    ) -> AsyncIterator[bytes]:
        await self.admission.acquire()
        version = upstream.policy_version
        events = upstream.stream(kind, body, owner=ctx.rollout_id)
        try:
            first = await anext(events)
        except BaseException as exc:
            self.admission.release()
            if isinstance(exc, GatewayError):
                await self.record_failure(ctx, kind, body, upstream, started, exc, version)
            raise
        return _Relay(self, ctx, kind, body, upstream, started, version).events(first, events)


@dataclass
class _Relay:
    """A streamed call on its way to the agent: its events, then its span, then `[DONE]`. An agent that
    goes away mid-stream closes the relay at the event it last got: the call is recorded then with what
    was generated so far, with status `aborted` (see `send_events`)."""

    gateway: Gateway
    ctx: CallContext
    kind: CallKind
    body: dict[str, Any]
    upstream: Upstream
    started: float
    policy_version: int | None

    async def events(
        self, first: bytes | CallRecord, events: AsyncGenerator[bytes | CallRecord, None]
    ) -> AsyncIterator[bytes]:
        gateway, ctx, kind, body = self.gateway, self.ctx, self.kind, self.body
        relayed: list[bytes] = []  # to rebuild the call from, should the agent go away
        try:
            item = first
            while not isinstance(item, CallRecord):
                relayed.append(item)
                try:
                    yield item
                except GeneratorExit:
                    await self._record_abandoned(events, relayed)
                    raise
                item = await anext(events)
            # The call is on disk before the agent sees the end of the stream.
            await gateway.record(call_span(ctx, kind, body, self.upstream.name, self.started, item))
            yield b"data: [DONE]\n\n"
        except GatewayError as exc:
            with suppress(GatewayError):
                await gateway.record_failure(
                    ctx, kind, body, self.upstream, self.started, exc, self.policy_version
                )
            yield sse(exc.body())
        finally:
            gateway.admission.release()
            await events.aclose()

    async def _record_abandoned(
        self, events: AsyncGenerator[bytes | CallRecord, None], relayed: list[bytes]
    ) -> None:
        record = await _partial_record(events) or record_of_events(self.kind, relayed, self.policy_version)
        span = call_span(
            self.ctx, self.kind, self.body, self.upstream.name, self.started, record, aborted=True
        )
        with suppress(GatewayError):  # nobody is left to tell
            await self.gateway.record(span)


async def _partial_record(events: AsyncGenerator[bytes | CallRecord, None]) -> CallRecord | None:
    """What an upstream generated before the agent went away, if it can tell (see `StreamAborted`)."""
    try:
        answer = await events.athrow(StreamAborted())
    except Exception:  # it could not: whatever it raised, the relayed events are what is left
        return None
    return answer if isinstance(answer, CallRecord) else None


SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # unbuffered by proxies in between
]


async def send_events(events: AsyncIterator[bytes], receive: Receive, send: Send) -> None:
    """Server-sent events, as plain ASGI. An agent that disconnects is noticed at the next event: the
    stream is closed there, so the relay records what was generated until then and stops the upstream.
    (Not cancelled mid-step, as Starlette's StreamingResponse would: that would lose the partial call.)"""
    gone = asyncio.ensure_future(_disconnected(receive))
    try:
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        async for chunk in events:
            if gone.done():
                break
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        else:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
    except OSError:  # a server that reports the disconnect on send rather than on receive
        pass
    finally:
        gone.cancel()
        await close_quietly(events)


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


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
    return GatewayError(413, too_large_message(limit), code="request_too_large")


# Refusals of a call's own recording, or of a body too deep to handle: nothing of them is stored.
UNKEPT_REFUSALS = frozenset({"unrecordable", "too_deep"})


def _kept_refusal(error: GatewayError) -> bool:
    """Whether a refused call is kept as a span: a 4xx of the gateway's own checks (an upstream's errors
    are recorded as failed calls already)."""
    return error.status < 500 and not isinstance(error, UpstreamError) and error.code not in UNKEPT_REFUSALS
