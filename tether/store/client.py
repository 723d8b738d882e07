"""`StoreClient`: the `Store` protocol over the store's HTTP API, for workers on other machines."""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

import httpx
import orjson
from pydantic import TypeAdapter, ValidationError
from pydantic_core import to_jsonable_python

from tether.store.api import BY_METHOD, Route
from tether.store.base import InvalidTransition, InvalidValue, NotFound, Store, StoreAuthError, StoreError
from tether.store.records import Reward, Rollout, RolloutRecord, Span

T = TypeVar("T")
P = ParamSpec("P")
ROLLOUTS = TypeAdapter(list[Rollout])

RETRYABLE = (httpx.ConnectError, httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)
RETRY_DELAYS_S = (0.1, 0.3)
# Each long-poll stays under the server's cap, so the server answers before the HTTP timeout fires.
LONG_POLL_S = 50.0
REMOTE_EPOCH_S = 1.0
# Rollouts per `read_rollouts` request: an answer holds every span of its rollouts, token ids and all.
READ_BATCH = 100


def _error_fields(response: httpx.Response) -> tuple[str, str | None, str | None]:
    try:
        error = orjson.loads(response.content)["error"]
        return str(error["message"]), error.get("code"), error.get("param")
    except (orjson.JSONDecodeError, KeyError, TypeError):
        text = response.text.strip()[:500] or response.reason_phrase
        return f"HTTP {response.status_code}: {text}", None, None


def _not_found(response: httpx.Response, code: str | None, param: str | None) -> NotFound:
    if code and code.endswith("_not_found") and param is not None:
        return NotFound(code.removesuffix("_not_found").replace("_", " "), param)
    return NotFound("route", f"{response.request.method} {response.request.url.path}")


def _raise_for_status(response: httpx.Response) -> None:
    if response.is_success:
        return
    message, code, param = _error_fields(response)
    status = response.status_code
    if status == 404:
        raise _not_found(response, code, param)
    if status == 409:
        raise InvalidTransition(message)
    if status in (400, 413):  # the store refused this value: the caller's, not the store's, failure
        raise InvalidValue(message)
    if status in (401, 403):
        raise StoreAuthError(message, status)
    raise StoreError(f"store request {response.request.method} {response.request.url.path} failed: {message}")


def remote(method: Callable[Concatenate[Store, P], T]) -> Callable[Concatenate[StoreClient, P], T]:
    """The client's `method`: its arguments, bound by the `Store` signature, sent by its route's rule."""
    route = BY_METHOD[method.__name__]
    signature = inspect.signature(method)

    @functools.wraps(method)
    def call(self: StoreClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        answer: T = self._call(route, bound.arguments)
        return answer

    return call


class StoreClient:
    """A `Store` backed by a store server (`tether.store.server`), over sync HTTP."""

    def __init__(self, base_url: str, token: str, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._http = httpx.Client(
            base_url=self.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout
        )

    def __enter__(self) -> StoreClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- plumbing -------------------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        timeout: float | None = None,
        retry: bool = False,
    ) -> httpx.Response:
        if self._http.is_closed:
            raise StoreError("the store client is closed")
        content = None if body is None else orjson.dumps(body)
        headers = None if body is None else {"Content-Type": "application/json"}
        query = {key: value for key, value in (params or {}).items() if value is not None}
        delays = RETRY_DELAYS_S if retry else ()
        for attempt in range(len(delays) + 1):
            try:
                response = self._http.request(
                    method,
                    path,
                    content=content,
                    headers=headers,
                    params=query,
                    timeout=timeout if timeout is not None else self.timeout,
                )
                break
            except RETRYABLE as exc:
                if attempt == len(delays):
                    raise StoreError(f"cannot reach the store at {self.base_url}: {exc!r}") from exc
                time.sleep(delays[attempt])
            except httpx.HTTPError as exc:
                raise StoreError(f"store request to {self.base_url} failed: {exc!r}") from exc
        _raise_for_status(response)
        return response

    def _parse(self, adapter: TypeAdapter[T], response: httpx.Response) -> T:
        try:
            return adapter.validate_json(response.content)
        except ValidationError as exc:
            raise StoreError(f"unexpected answer from the store at {self.base_url}: {exc}") from exc

    def _call(self, route: Route, arguments: dict[str, Any]) -> Any:
        path = route.url(arguments)
        if route.verb == "GET":
            fields = route.query.model_fields if route.query is not None else {}
            params = {name: to_jsonable_python(arguments[name]) for name in fields}
            response = self._send("GET", path, params=params, retry=True)
        else:
            response = self._send(route.verb, path, body=_body(route, arguments))
        return None if route.answer is None else self._parse(route.adapter, response)

    # -- the table's methods (tether.store.api), with the Store protocol's signatures --------------------

    enqueue = remote(Store.enqueue)
    claim = remote(Store.claim)
    heartbeat = remote(Store.heartbeat)
    update_status = remote(Store.update_status)
    start_session = remote(Store.start_session)
    get_rollout = remote(Store.get_rollout)
    list_rollouts = remote(Store.list_rollouts)
    query_rollouts = remote(Store.query_rollouts)
    list_runs = remote(Store.list_runs)
    rename_run = remote(Store.rename_run)
    list_attempts = remote(Store.list_attempts)
    abandon = remote(Store.abandon)
    requeue_stale = remote(Store.requeue_stale)
    query_spans = remote(Store.query_spans)
    query_rewards = remote(Store.query_rewards)
    put_resource = remote(Store.put_resource)
    get_resource = remote(Store.get_resource)
    list_resources = remote(Store.list_resources)

    # -- the rest -------------------------------------------------------------------------------------

    def wait_for(self, rollout_ids: Sequence[str], timeout: float | None = None) -> list[Rollout]:
        ids = list(rollout_ids)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            poll = LONG_POLL_S if remaining is None else min(remaining, LONG_POLL_S)
            response = self._send(
                "POST",
                BY_METHOD["wait_for"].url({}),
                body={"rollout_ids": ids, "timeout": poll},
                timeout=poll + self.timeout,
                retry=True,
            )
            finished = self._parse(ROLLOUTS, response)
            if len(finished) == len(ids) or (deadline is not None and time.monotonic() >= deadline):
                return finished

    def add_spans(self, spans: Sequence[Span]) -> None:
        if spans:
            self._call(BY_METHOD["add_spans"], {"spans": spans})

    def add_rewards(self, rewards: Sequence[Reward]) -> None:
        if rewards:
            self._call(BY_METHOD["add_rewards"], {"rewards": rewards})

    def read_rollouts(self, rollout_ids: Sequence[str]) -> list[RolloutRecord]:
        ids, route = list(rollout_ids), BY_METHOD["read_rollouts"]
        records: list[RolloutRecord] = []
        for start in range(0, len(ids), READ_BATCH):
            body = {"rollout_ids": ids[start : start + READ_BATCH]}
            # A read: safe to send again when the connection failed.
            response = self._send("POST", route.url({}), body=body, retry=True)
            records += self._parse(route.adapter, response)
        return records

    def rollouts_epoch(self) -> Hashable:
        # The server's changes are not visible from here: cached rollouts live at most this long.
        return int(time.monotonic() / REMOTE_EPOCH_S)

    def ping(self) -> None:
        """Check that the server answers and accepts the token (StoreError or StoreAuthError if not)."""
        self._send("GET", "/store/resources", retry=True)

    def close(self) -> None:
        self._http.close()


def _body(route: Route, arguments: dict[str, Any]) -> Any:
    """The JSON body: the fields of the route's body model, taken from the arguments of the same names."""
    if route.whole_body is not None:
        return to_jsonable_python(arguments[route.whole_body])
    fields = route.body.model_fields if route.body is not None else {}
    return {name: to_jsonable_python(arguments[name]) for name in fields}
