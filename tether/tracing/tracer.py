"""A light built-in tracer for agents that do not run OpenTelemetry.

    from tether.tracing import span, traced, emit_reward

    with span("tool:search", query=q) as s:
        s.set_attribute("hits", len(hits))
    emit_reward(1.0)

Inside a rollout run by Tether (`TETHER_SERVER`, `OPENAI_API_KEY` and `TETHER_ROLLOUT_ID` set), finished
spans are buffered and posted to `<TETHER_SERVER>/store/spans` when a root span ends and at exit.
Tracing never raises into the agent: a failed post is logged once and its spans are dropped. Without
those variables spans are dropped, unless `configure` names a store or server. Rewards are different:
`emit_reward` raises when the reward cannot be delivered.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import functools
import inspect
import logging
import math
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import orjson

if TYPE_CHECKING:
    from tether.store.base import Store

log = logging.getLogger("tether.tracing")

HTTP_TIMEOUT_S = 5.0
MAX_BUFFERED_SPANS = 512
REWARD_TRIES = 3
_INT64 = 2**63
STATUSES = ("ok", "error", "unset")

F = TypeVar("F", bound=Callable[..., Any])


def _jsonable(value: Any) -> Any:
    """A JSON-safe copy of an attribute value; anything unknown becomes its repr."""
    if value is None or isinstance(value, str | bool):
        return value
    if isinstance(value, int):
        return value if -_INT64 <= value < _INT64 else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, bytes):
        return value.hex()
    try:
        return repr(value)
    except Exception:
        return f"<unrepresentable {type(value).__qualname__}>"


# -- sinks ----------------------------------------------------------------------------------------------


class Sink(Protocol):
    """Where finished spans and rewards go."""

    def add(self, span: dict[str, Any]) -> None: ...

    def flush(self) -> None: ...

    def reward(self, reward: dict[str, Any]) -> None: ...


class NullSink:
    def add(self, span: dict[str, Any]) -> None:
        pass

    def flush(self) -> None:
        pass

    def reward(self, reward: dict[str, Any]) -> None:
        raise RuntimeError(
            "emit_reward: no rollout to send the reward to. Run the agent under Tether (which sets "
            "TETHER_SERVER, OPENAI_API_KEY and TETHER_ROLLOUT_ID) or call tether.tracing.configure(...) first"
        )


@dataclass
class BufferedSink:
    """Buffers span dicts and ships them in batches; subclasses say how."""

    rollout_id: str
    attempt: int | None = None
    buffer: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    warned: bool = False

    def add(self, span: dict[str, Any]) -> None:
        span["rollout_id"] = self.rollout_id
        with self.lock:
            self.buffer.append(span)
            full = len(self.buffer) >= MAX_BUFFERED_SPANS
        if full:
            self.flush()

    def flush(self) -> None:
        with self.lock:
            batch, self.buffer = self.buffer, []
        if not batch:
            return
        try:
            self.send(batch)
        except Exception as exc:
            if not self.warned:
                self.warned = True
                log.warning(
                    "tether tracing: dropped %d span(s): %s (further tracing errors are not reported)",
                    len(batch),
                    exc,
                )

    def send(self, spans: list[dict[str, Any]]) -> None:
        raise NotImplementedError


@dataclass
class StoreSink(BufferedSink):
    """Writes straight to a `Store` object (in-process agents, tests)."""

    store: Store | None = None

    def send(self, spans: list[dict[str, Any]]) -> None:
        from tether.store.records import Span

        assert self.store is not None
        for span in spans:
            span["attempt"] = self.attempt
        self.store.add_spans([Span.model_validate(span) for span in spans])

    def reward(self, reward: dict[str, Any]) -> None:
        from tether.store.records import Reward

        assert self.store is not None
        reward = reward | {"rollout_id": self.rollout_id, "attempt": self.attempt}
        self.store.add_rewards([Reward.model_validate(reward)])


class HTTPError(Exception):
    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class HTTPSink(BufferedSink):
    """Posts to the store API of a Tether server with the rollout's token."""

    server: str = ""
    token: str = ""
    attempt_known: bool = False

    def _request(self, method: str, path: str, body: Any = None) -> bytes:
        data = None if body is None else orjson.dumps(body, default=repr)
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        request = urllib.request.Request(self.server.rstrip("/") + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            raise HTTPError(exc.code, f"{method} {path}: HTTP {exc.code}: {_error_message(exc)}") from None
        except (OSError, ValueError) as exc:
            raise HTTPError(None, f"{method} {path}: {exc}") from None

    def current_attempt(self) -> int | None:
        # The store API does not fill in the attempt, so ask once which attempt this rollout is on.
        if not self.attempt_known and self.attempt is None:
            try:
                rollout = orjson.loads(
                    self._request("GET", f"/store/rollouts/{urllib.parse.quote(self.rollout_id, safe='')}")
                )
                self.attempt = rollout.get("attempt_count") or None
                self.attempt_known = True
            except (HTTPError, orjson.JSONDecodeError, AttributeError):
                return None
        return self.attempt

    def send(self, spans: list[dict[str, Any]]) -> None:
        attempt = self.current_attempt()
        for span in spans:
            span["attempt"] = attempt
        self._request("POST", "/store/spans", {"spans": spans})

    def reward(self, reward: dict[str, Any]) -> None:
        body = {"rewards": [reward | {"rollout_id": self.rollout_id, "attempt": self.current_attempt()}]}
        for attempt in range(REWARD_TRIES):
            try:
                self._request("POST", "/store/rewards", body)
                return
            except HTTPError as exc:
                retryable = exc.status is None or exc.status >= 500
                if not retryable or attempt == REWARD_TRIES - 1:
                    raise RuntimeError(f"emit_reward: the reward was not recorded: {exc}") from None
                time.sleep(0.1 * (attempt + 1))


def _error_message(exc: urllib.error.HTTPError) -> str:
    try:
        return str(orjson.loads(exc.read())["error"]["message"])
    except Exception:
        return exc.reason if isinstance(exc.reason, str) else "error"


# -- configuration --------------------------------------------------------------------------------------


@dataclass
class _State:
    sink: Sink | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    atexit_registered: bool = False


_state = _State()


def _sink_from_env() -> Sink:
    server = os.environ.get("TETHER_SERVER")
    token = os.environ.get("OPENAI_API_KEY")
    rollout_id = os.environ.get("TETHER_ROLLOUT_ID")
    if not (server and token and rollout_id):
        return NullSink()
    return HTTPSink(rollout_id=rollout_id, server=server, token=token)


def _install(sink: Sink) -> None:
    _state.sink = sink
    if not isinstance(sink, NullSink) and not _state.atexit_registered:
        _state.atexit_registered = True
        atexit.register(flush)


def _sink() -> Sink:
    sink = _state.sink
    if sink is None:
        with _state.lock:
            if _state.sink is None:
                _install(_sink_from_env())
            sink = _state.sink
    assert sink is not None
    return sink


def configure(
    *,
    store: Store | None = None,
    rollout_id: str | None = None,
    attempt: int | None = None,
    server: str | None = None,
    token: str | None = None,
) -> None:
    """Choose where spans and rewards go, flushing what was buffered for the previous destination.

    `configure(store=s, rollout_id=r)` writes to a local `Store`; `configure(server=url, token=t,
    rollout_id=r)` posts to a Tether server; `configure()` goes back to the environment variables.
    """
    if store is not None and server is not None:
        raise ValueError("configure: give a store or a server, not both")
    if (store is not None or server is not None) and not rollout_id:
        raise ValueError("configure: a rollout_id is needed to attribute spans")
    if server is not None and not token:
        raise ValueError("configure: a server needs the rollout's token")
    sink: Sink
    if store is not None:
        sink = StoreSink(rollout_id=rollout_id or "", attempt=attempt, store=store)
    elif server is not None:
        sink = HTTPSink(rollout_id=rollout_id or "", attempt=attempt, server=server, token=token or "")
    else:
        sink = _sink_from_env()
    with _state.lock:
        previous = _state.sink
        _install(sink)
    if previous is not None:
        previous.flush()


def flush() -> None:
    """Send every buffered span now. Never raises."""
    sink = _state.sink
    if sink is not None:
        sink.flush()


# -- spans ----------------------------------------------------------------------------------------------

_current: contextvars.ContextVar[SpanHandle | None] = contextvars.ContextVar("tether_span", default=None)


def _new_id(size: int) -> str:
    return os.urandom(size).hex()


class SpanHandle:
    """A span being recorded; use it as a context manager (`with` or `async with`)."""

    __slots__ = (
        "name",
        "trace_id",
        "span_id",
        "parent_id",
        "start_time",
        "end_time",
        "attributes",
        "events",
        "status",
        "status_message",
        "_token",
    )

    def __init__(self, name: str, attributes: dict[str, Any]) -> None:
        self.name = name
        self.trace_id = ""
        self.span_id = _new_id(8)
        self.parent_id: str | None = None
        self.start_time = 0.0
        self.end_time: float | None = None
        self.attributes = {key: _jsonable(value) for key, value in attributes.items()}
        self.events: list[dict[str, Any]] = []
        self.status: str | None = None
        self.status_message: str | None = None
        self._token: contextvars.Token[SpanHandle | None] | None = None

    def set_attribute(self, key: str, value: Any) -> None:
        self.attributes[key] = _jsonable(value)

    def set_attributes(self, **attributes: Any) -> None:
        self.attributes.update(_jsonable(attributes))

    def add_event(self, name: str, /, **attributes: Any) -> None:
        self.events.append({"name": name, "time": time.time(), "attributes": _jsonable(attributes)})

    def set_status(self, status: str, message: str | None = None) -> None:
        """`ok`, `error` or `unset`, with an optional message."""
        if status not in STATUSES:
            raise ValueError(f"span status must be one of {', '.join(STATUSES)}, not {status!r}")
        self.status = status
        self.status_message = message

    @property
    def is_root(self) -> bool:
        return self.parent_id is None

    def _start(self) -> None:
        parent = _current.get()
        if parent is None:
            self.trace_id = _new_id(16)
        else:
            self.trace_id, self.parent_id = parent.trace_id, parent.span_id
        self.start_time = time.time()
        self._token = _current.set(self)

    def _end(self, exc: BaseException | None) -> None:
        self.end_time = time.time()
        if self._token is not None:
            try:
                _current.reset(self._token)
            except ValueError:
                # Exited in another context than it was entered in (e.g. a generator moved across tasks).
                pass
            self._token = None
        if exc is not None:
            self.status, self.status_message = "error", str(exc) or type(exc).__name__
            self.add_event(
                "exception", **{"exception.type": type(exc).__qualname__, "exception.message": str(exc)}
            )
        elif self.status is None:
            self.status = "ok"
        try:
            _sink().add(self._as_dict())
        except Exception as error:
            log.debug("tether tracing: span dropped: %s", error)

    def _as_dict(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "parent_id": self.parent_id,
            "name": self.name,
            "kind": "internal",
            "start_time": self.start_time,
            "end_time": self.end_time,
            "status": self.status,
            "status_message": self.status_message,
            "attributes": self.attributes,
            "events": self.events,
        }

    def __enter__(self) -> SpanHandle:
        self._start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._end(exc)
        if self.is_root:
            _sink().flush()

    async def __aenter__(self) -> SpanHandle:
        self._start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._end(exc)
        sink = _sink()
        if self.is_root and isinstance(sink, BufferedSink) and sink.buffer:
            try:
                await asyncio.get_running_loop().run_in_executor(None, sink.flush)
            except RuntimeError:
                sink.flush()


def span(name: str, /, **attributes: Any) -> SpanHandle:
    """A span named `name`, child of the current span (if any); use with `with` or `async with`."""
    return SpanHandle(name, attributes)


def current_span() -> SpanHandle | None:
    return _current.get()


def traced(name: str | None = None) -> Callable[[F], F]:
    """Decorate a sync or async function so that each call is a span (named after the function)."""

    def decorate(function: F) -> F:
        span_name = name or function.__qualname__
        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                async with span(span_name):
                    return await function(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with span(span_name):
                return function(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


# -- rewards --------------------------------------------------------------------------------------------


def emit_reward(
    value: float, name: str = "reward", *, span_id: str | None = None, primary: bool = True
) -> None:
    """Record a reward for the current rollout, linked to the current span unless `span_id` is given.

    Raises `RuntimeError` when there is no rollout to send it to or the server refuses it.
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"emit_reward: the reward must be a finite number, not {value!r}")
    if span_id is None:
        current = _current.get()
        span_id = current.span_id if current is not None else None
    reward = {
        "value": float(value),
        "name": name,
        "span_id": span_id,
        "source": "agent",
        "time": time.time(),
        "primary": primary,
    }
    _sink().reward(reward)
