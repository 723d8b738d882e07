"""`StoreClient`: the `Store` protocol over the store's HTTP API, for workers on other machines."""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import orjson
from pydantic import BaseModel, TypeAdapter, ValidationError

from tether.store.base import InvalidTransition, InvalidValue, NotFound, StoreAuthError, StoreError
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
)

T = TypeVar("T")

ROLLOUT = TypeAdapter(Rollout)
ROLLOUTS = TypeAdapter(list[Rollout])
ATTEMPTS = TypeAdapter(list[Attempt])
SPANS = TypeAdapter(list[Span])
REWARDS = TypeAdapter(list[Reward])
RESOURCES = TypeAdapter(list[Resource])
CLAIM = TypeAdapter(Claim)
MAYBE_CLAIM = TypeAdapter(Claim | None)
RESOURCE = TypeAdapter(Resource)
STRINGS = TypeAdapter(list[str])
COUNT = TypeAdapter(int)
PAGE = TypeAdapter(RolloutPage)

RETRYABLE = (httpx.ConnectError, httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)
RETRY_DELAYS_S = (0.1, 0.3)
# Each long-poll stays under the server's cap, so the server answers before the HTTP timeout fires.
LONG_POLL_S = 50.0
REMOTE_EPOCH_S = 1.0


def _dump(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json")


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

    def _get(self, adapter: TypeAdapter[T], path: str, params: dict[str, Any] | None = None) -> T:
        return self._parse(adapter, self._send("GET", path, params=params, retry=True))

    def _post(self, adapter: TypeAdapter[T], path: str, body: Any) -> T:
        return self._parse(adapter, self._send("POST", path, body=body))

    @staticmethod
    def _rollout_path(rollout_id: str, suffix: str = "") -> str:
        return f"/store/rollouts/{quote(rollout_id, safe='')}{suffix}"

    @staticmethod
    def _resource_path(name: str) -> str:
        return f"/store/resources/{quote(name, safe='')}"

    # -- rollouts -------------------------------------------------------------------------------------

    def enqueue(self, requests: Sequence[RolloutRequest]) -> list[Rollout]:
        return self._post(ROLLOUTS, "/store/rollouts", {"requests": [_dump(r) for r in requests]})

    def claim(self, worker_id: str, run: str | None = None) -> Claim | None:
        return self._post(MAYBE_CLAIM, "/store/rollouts/claim", {"worker_id": worker_id, "run": run})

    def heartbeat(self, rollout_id: str, attempt: int) -> None:
        self._send("POST", self._rollout_path(rollout_id, "/heartbeat"), body={"attempt": attempt})

    def update_status(
        self,
        rollout_id: str,
        status: RolloutStatus,
        *,
        output: str | None = None,
        error: str | None = None,
        attempt: int | None = None,
    ) -> Rollout:
        body = {"status": RolloutStatus(status).value, "output": output, "error": error, "attempt": attempt}
        return self._post(ROLLOUT, self._rollout_path(rollout_id, "/status"), body)

    def start_session(
        self, input: dict[str, Any] | None = None, worker_id: str = "session", mode: str = "session"
    ) -> Claim:
        return self._post(CLAIM, "/store/sessions", {"input": input, "worker_id": worker_id, "mode": mode})

    def get_rollout(self, rollout_id: str) -> Rollout:
        return self._get(ROLLOUT, self._rollout_path(rollout_id))

    def list_rollouts(
        self,
        *,
        status: RolloutStatus | None = None,
        since: float | None = None,
        until: float | None = None,
        run: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Rollout]:
        status_value = None if status is None else RolloutStatus(status).value
        params = {
            "status": status_value,
            "since": since,
            "until": until,
            "run": run,
            "limit": limit,
            "offset": offset,
        }
        return self._get(ROLLOUTS, "/store/rollouts", params)

    def query_rollouts(self, query: RolloutQuery) -> RolloutPage:
        return self._post(PAGE, "/store/rollouts/query", _dump(query))

    def list_runs(self) -> list[str]:
        return self._get(STRINGS, "/store/runs")

    def rename_run(self, run: str, new_name: str) -> int:
        body = {"new_name": new_name}
        return self._post(COUNT, f"/store/runs/{quote(run, safe='')}/rename", body)

    def list_attempts(self, rollout_id: str) -> list[Attempt]:
        return self._get(ATTEMPTS, self._rollout_path(rollout_id, "/attempts"))

    def wait_for(self, rollout_ids: Sequence[str], timeout: float | None = None) -> list[Rollout]:
        ids = list(rollout_ids)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            poll = LONG_POLL_S if remaining is None else min(remaining, LONG_POLL_S)
            response = self._send(
                "POST",
                "/store/rollouts/wait",
                body={"rollout_ids": ids, "timeout": poll},
                timeout=poll + self.timeout,
                retry=True,
            )
            finished = self._parse(ROLLOUTS, response)
            if len(finished) == len(ids) or (deadline is not None and time.monotonic() >= deadline):
                return finished

    def abandon(self, rollout_id: str, attempt: int, reason: str) -> Rollout:
        body = {"attempt": attempt, "reason": reason}
        return self._post(ROLLOUT, self._rollout_path(rollout_id, "/abandon"), body)

    def rollouts_epoch(self) -> Hashable:
        # The server's changes are not visible from here: cached rollouts live at most this long.
        return int(time.monotonic() / REMOTE_EPOCH_S)

    def ping(self) -> None:
        """Check that the server answers and accepts the token (StoreError or StoreAuthError if not)."""
        self._send("GET", "/store/resources", retry=True)

    def requeue_stale(self, heartbeat_timeout: float) -> list[str]:
        return self._post(STRINGS, "/store/requeue-stale", {"heartbeat_timeout": heartbeat_timeout})

    # -- spans and rewards ----------------------------------------------------------------------------

    def add_spans(self, spans: Sequence[Span]) -> None:
        if spans:
            self._send("POST", "/store/spans", body={"spans": [_dump(span) for span in spans]})

    def query_spans(
        self,
        *,
        rollout_id: str | None = None,
        attempt: int | None = None,
        name: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 1000,
    ) -> list[Span]:
        params = {
            "rollout_id": rollout_id,
            "attempt": attempt,
            "name": name,
            "since": since,
            "until": until,
            "limit": limit,
        }
        return self._get(SPANS, "/store/spans", params)

    def add_rewards(self, rewards: Sequence[Reward]) -> None:
        if rewards:
            self._send("POST", "/store/rewards", body={"rewards": [_dump(reward) for reward in rewards]})

    def query_rewards(self, rollout_id: str) -> list[Reward]:
        return self._get(REWARDS, self._rollout_path(rollout_id, "/rewards"))

    # -- resources ------------------------------------------------------------------------------------

    def put_resource(self, name: str, kind: str, value: Any) -> Resource:
        body = {"kind": kind, "value": value}
        return self._parse(RESOURCE, self._send("PUT", self._resource_path(name), body=body))

    def get_resource(self, name: str, version: int | None = None) -> Resource:
        return self._get(RESOURCE, self._resource_path(name), {"version": version})

    def list_resources(self) -> list[Resource]:
        return self._get(RESOURCES, "/store/resources")

    def close(self) -> None:
        self._http.close()
