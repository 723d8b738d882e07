"""The store's HTTP API: token scopes, OpenAI-style errors, the OpenAPI schema and the long-poll."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.helpers import serve_app
from tether.store.auth import TokenAuthority
from tether.store.base import InvalidTransition, NotFound, StoreAuthError, StoreError
from tether.store.client import StoreClient
from tether.store.records import Reward, Rollout, RolloutRequest, RolloutStatus, Span, Task
from tether.store.server import create_store_app, create_store_router, install_store_error_handlers
from tether.store.sqlite import SQLiteStore

if TYPE_CHECKING:
    from conftest import StoreServer

    Served = tuple[StoreServer, SQLiteStore]


@pytest.fixture
def server(served: Served) -> StoreServer:
    return served[0]


@pytest.fixture
def admin(server: StoreServer) -> Iterator[StoreClient]:
    client = server.client()
    yield client
    client.close()


@pytest.fixture
def raw(server: StoreServer) -> Iterator[httpx.Client]:
    """Plain HTTP with the admin token, to look at status codes and bodies."""
    with httpx.Client(base_url=server.base_url, headers=bearer(server.auth.admin_token)) as client:
        yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str)
    return error


def running_rollout(admin: StoreClient) -> Rollout:
    return admin.start_session({"q": "x"}).rollout


def span_for(rollout_id: str, name: str = "llm") -> Span:
    return Span(rollout_id=rollout_id, name=name, start_time=1.0)


# -- auth ---------------------------------------------------------------------------------------------


def test_admin_token_may_do_everything(admin: StoreClient) -> None:
    (rollout,) = admin.enqueue([RolloutRequest(task=Task())])
    assert admin.claim("w") is not None
    admin.heartbeat(rollout.id, 1)
    admin.add_spans([span_for(rollout.id)])
    admin.add_rewards([Reward(rollout_id=rollout.id, value=1.0)])
    admin.put_resource("p", "text", "v")
    assert admin.update_status(rollout.id, RolloutStatus.succeeded).status == RolloutStatus.succeeded
    assert len(admin.query_spans(rollout_id=rollout.id)) == 1
    assert len(admin.query_rewards(rollout.id)) == 1
    assert admin.list_rollouts() and admin.list_attempts(rollout.id) and admin.list_resources()
    assert admin.requeue_stale(3600.0) == []


def test_rollout_token_may_write_its_own_rollout(server: StoreServer, admin: StoreClient) -> None:
    rollout = running_rollout(admin)
    admin.put_resource("prompt", "text", "hi")
    admin.put_resource("canary:sessions", "canary", {"state": {"incumbent": {"path": "/policies/v3"}}})
    with server.client(server.auth.rollout_token(rollout.id, 1)) as scoped:
        scoped.add_spans([span_for(rollout.id, "a"), span_for(rollout.id, "b")])
        scoped.add_rewards([Reward(rollout_id=rollout.id, value=0.5, source="agent")])
        scoped.heartbeat(rollout.id, 1)
        assert scoped.get_rollout(rollout.id).id == rollout.id
        assert scoped.get_resource("prompt").value == "hi"
        assert [r.name for r in scoped.list_resources()] == ["prompt"]
        with pytest.raises(StoreError, match="canary records are the operator's"):
            scoped.get_resource("canary:sessions")
    assert [s.name for s in admin.query_spans(rollout_id=rollout.id)] == ["a", "b"]
    assert [r.value for r in admin.query_rewards(rollout.id)] == [0.5]


def test_rollout_token_is_forbidden_outside_its_rollout(server: StoreServer, admin: StoreClient) -> None:
    mine, other = running_rollout(admin), running_rollout(admin)
    forbidden_calls = {
        "spans of another rollout": lambda c: c.add_spans([span_for(other.id)]),
        "mixed spans": lambda c: c.add_spans([span_for(mine.id), span_for(other.id)]),
        "rewards of another rollout": lambda c: c.add_rewards([Reward(rollout_id=other.id, value=1.0)]),
        "read another rollout": lambda c: c.get_rollout(other.id),
        "heartbeat another rollout": lambda c: c.heartbeat(other.id, 1),
        "enqueue": lambda c: c.enqueue([RolloutRequest(task=Task())]),
        "claim": lambda c: c.claim("w"),
        "finish itself": lambda c: c.update_status(mine.id, RolloutStatus.succeeded),
        "list rollouts": lambda c: c.list_rollouts(),
        "list attempts": lambda c: c.list_attempts(mine.id),
        "query spans": lambda c: c.query_spans(rollout_id=mine.id),
        "query rewards": lambda c: c.query_rewards(mine.id),
        "put resource": lambda c: c.put_resource("p", "text", "v"),
        "wait": lambda c: c.wait_for([mine.id], timeout=0.1),
        "requeue": lambda c: c.requeue_stale(1.0),
        "session": lambda c: c.start_session(),
    }
    with server.client(server.auth.rollout_token(mine.id, 1)) as scoped:
        for what, call in forbidden_calls.items():
            with pytest.raises(StoreAuthError) as caught:
                call(scoped)
            assert caught.value.status == 403, what
    assert admin.query_spans() == []
    assert admin.query_rewards(other.id) == []
    assert admin.get_rollout(mine.id).status == RolloutStatus.running


def test_forbidden_scope_says_which_rollout(server: StoreServer, admin: StoreClient) -> None:
    mine, other = running_rollout(admin), running_rollout(admin)
    response = httpx.post(
        f"{server.base_url}/store/spans",
        json={"spans": [span_for(other.id).model_dump(mode="json")]},
        headers=bearer(server.auth.rollout_token(mine.id, 1)),
    )
    error = error_of(response, 403)
    assert error["type"] == "permission_error"
    assert mine.id in error["message"] and other.id in error["message"]


def test_rollout_token_expires_when_its_rollout_finishes(server: StoreServer, admin: StoreClient) -> None:
    rollout = running_rollout(admin)
    with server.client(server.auth.rollout_token(rollout.id, 1)) as scoped:
        scoped.add_spans([span_for(rollout.id)])
        admin.update_status(rollout.id, RolloutStatus.succeeded)
        for call in (
            lambda: scoped.add_spans([span_for(rollout.id, "late")]),
            lambda: scoped.add_rewards([Reward(rollout_id=rollout.id, value=1.0)]),
            lambda: scoped.get_rollout(rollout.id),
            lambda: scoped.list_resources(),
        ):
            with pytest.raises(StoreAuthError, match="expired") as caught:
                call()
            assert caught.value.status == 401
    assert [s.name for s in admin.query_spans(rollout_id=rollout.id)] == ["llm"]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer not-a-token"},
        {"Authorization": "Bearer tro-ro-x.0000000000000000000000000000000000000000"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer"},
    ],
    ids=["missing", "garbage", "bad-signature", "basic", "empty"],
)
def test_missing_or_invalid_tokens_get_401(server: StoreServer, headers: dict[str, str]) -> None:
    response = httpx.get(f"{server.base_url}/store/resources", headers=headers)
    error = error_of(response, 401)
    assert error["type"] == "authentication_error"
    assert "token" in error["message"]


def test_tokens_of_another_project_or_unknown_rollout_get_401(server: StoreServer) -> None:
    stranger = TokenAuthority.generate()
    for token in (
        stranger.admin_token,
        stranger.rollout_token("ro-1", 1),
        server.auth.rollout_token("ro-gone", 1),
    ):
        with server.client(token) as client, pytest.raises(StoreAuthError) as caught:
            client.list_resources()
        assert caught.value.status == 401


# -- errors ---------------------------------------------------------------------------------------------


def test_not_found_and_conflict_bodies(raw: httpx.Client, admin: StoreClient) -> None:
    error = error_of(raw.get("/store/rollouts/ro-missing"), 404)
    assert error == {
        "message": "rollout 'ro-missing' not found",
        "type": "not_found_error",
        "param": "ro-missing",
        "code": "rollout_not_found",
    }
    (rollout,) = admin.enqueue([RolloutRequest(task=Task())])
    admin.update_status(rollout.id, RolloutStatus.cancelled)
    error = error_of(raw.post(f"/store/rollouts/{rollout.id}/status", json={"status": "succeeded"}), 409)
    assert error["code"] == "invalid_transition" and "already cancelled" in error["message"]
    with pytest.raises(InvalidTransition, match="already cancelled"):
        admin.update_status(rollout.id, RolloutStatus.succeeded)
    with pytest.raises(NotFound, match="resource 'nope' not found"):
        admin.get_resource("nope")


def test_malformed_json_is_a_400(raw: httpx.Client) -> None:
    for body in (b'{"requests": [', b"not json", b'{"spans": [{"start_time": NaN}]}', b'"\\ud800"'):
        response = raw.post("/store/spans", content=body, headers={"Content-Type": "application/json"})
        error = error_of(response, 400)
        assert error["code"] == "invalid_json"
        assert error["message"].startswith("malformed JSON body")


@pytest.mark.parametrize(
    ("method", "path", "payload", "mentions"),
    [
        ("POST", "/store/rollouts", {"requests": [{"task": 5}]}, "requests.0.task"),
        ("POST", "/store/rollouts", {}, "body.requests: Field required"),
        ("POST", "/store/rollouts", {"requests": [{"task": {}, "max_attempts": 0}]}, "max_attempts"),
        ("POST", "/store/rollouts/ro-1/status", {"status": "exploded"}, "body.status"),
        ("POST", "/store/rollouts/ro-1/heartbeat", {"attempt": 2**64 - 1}, "body.attempt"),
        ("POST", "/store/spans", {"spans": [{"rollout_id": "r", "name": "n"}]}, "start_time"),
        ("POST", "/store/rollouts/wait", {"rollout_ids": [], "timeout": -1}, "body.timeout"),
        ("GET", "/store/rollouts?limit=-1", None, "query.limit"),
        ("GET", "/store/rollouts?status=bogus", None, "query.status"),
        ("GET", "/store/spans?attempt=18446744073709551615", None, "query.attempt"),
        ("GET", "/store/resources/p?version=x", None, "query.version"),
    ],
)
def test_invalid_requests_are_400_with_a_summary(
    raw: httpx.Client, method: str, path: str, payload: Any, mentions: str
) -> None:
    error = error_of(raw.request(method, path, json=payload), 400)
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_request"
    assert error["message"].startswith("invalid request: ")
    assert mentions in error["message"]


def test_unknown_routes_and_methods_are_openai_style(raw: httpx.Client) -> None:
    assert error_of(raw.get("/store/nothing-here"), 404)["code"] == "route_not_found"
    assert error_of(raw.delete("/store/rollouts"), 405)["code"] == "method_not_allowed"


def test_unwritable_database_is_a_503(served: Served, raw: httpx.Client, admin: StoreClient) -> None:
    _, backing = served
    backing._db.execute("PRAGMA query_only=ON")
    error = error_of(raw.post("/store/rollouts", json={"requests": [{"task": {}}]}), 503)
    assert error["code"] == "store_unavailable" and "readonly" in error["message"]
    with pytest.raises(StoreError, match="readonly") as caught:
        admin.put_resource("p", "text", "v")
    assert type(caught.value) is StoreError
    assert admin.list_rollouts() == []
    backing._db.execute("PRAGMA query_only=OFF")


def test_client_reports_an_unreachable_server_as_store_error() -> None:
    with StoreClient("http://127.0.0.1:9", "token", timeout=2.0) as client:
        with pytest.raises(StoreError, match="cannot reach the store"):
            client.list_rollouts()
        with pytest.raises(StoreError, match="cannot reach the store"):
            client.enqueue([])
    with pytest.raises(StoreError, match="closed"):
        client.list_rollouts()


# -- schema, mounting, long-poll --------------------------------------------------------------------------


def test_openapi_lists_every_route(server: StoreServer) -> None:
    schema = httpx.get(f"{server.base_url}/openapi.json").json()
    routes = {(method.upper(), path) for path, item in schema["paths"].items() for method in item}
    assert routes == {
        ("POST", "/store/rollouts"),
        ("POST", "/store/rollouts/{rollout_id}/abandon"),
        ("GET", "/store/runs"),
        ("POST", "/store/runs/{run}/rename"),
        ("GET", "/store/rollouts"),
        ("POST", "/store/rollouts/query"),
        ("POST", "/store/rollouts/claim"),
        ("POST", "/store/rollouts/wait"),
        ("POST", "/store/rollouts/read"),
        ("POST", "/store/requeue-stale"),
        ("POST", "/store/sessions"),
        ("GET", "/store/rollouts/{rollout_id}"),
        ("GET", "/store/rollouts/{rollout_id}/attempts"),
        ("POST", "/store/rollouts/{rollout_id}/status"),
        ("POST", "/store/rollouts/{rollout_id}/heartbeat"),
        ("GET", "/store/rollouts/{rollout_id}/rewards"),
        ("POST", "/store/spans"),
        ("GET", "/store/spans"),
        ("POST", "/store/rewards"),
        ("GET", "/store/resources"),
        ("PUT", "/store/resources/{name}"),
        ("GET", "/store/resources/{name}"),
    }
    claim = schema["paths"]["/store/rollouts/claim"]["post"]
    assert claim["operationId"] == "store_claim"
    assert {"400", "401", "403"} <= set(claim["responses"])
    assert "422" not in claim["responses"]
    components = schema["components"]
    assert {"ErrorResponse", "Claim", "Span", "SpanInput", "Rollout"} <= set(components["schemas"])
    assert "HTTPValidationError" not in components["schemas"]
    assert components["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


def test_router_mounts_into_another_app(tmp_path: Path) -> None:
    auth = TokenAuthority.generate()
    store = SQLiteStore(tmp_path / "mounted.db")
    app = FastAPI()
    app.include_router(create_store_router(store, auth))
    install_store_error_handlers(app)
    with TestClient(app, headers=bearer(auth.admin_token)) as client:
        assert client.put("/store/resources/a", json={"kind": "k", "value": 1}).json()["version"] == 1
        response = client.post("/store/rewards", content=b"{", headers={"Content-Type": "application/json"})
        assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json"
        assert client.get("/store/rollouts/ro-x").json()["error"]["code"] == "rollout_not_found"
    store.close()


def test_long_poll_returns_when_another_client_finishes(server: StoreServer, admin: StoreClient) -> None:
    rollout = running_rollout(admin)

    def finish() -> None:
        time.sleep(0.3)
        with server.client() as other:
            other.update_status(rollout.id, RolloutStatus.failed, error="nope")

    finisher = threading.Thread(target=finish, daemon=True)
    finisher.start()
    response = httpx.post(
        f"{server.base_url}/store/rollouts/wait",
        json={"rollout_ids": [rollout.id], "timeout": 30},
        headers=bearer(server.auth.admin_token),
        timeout=60,
    )
    finisher.join()
    assert response.status_code == 200
    (finished,) = response.json()
    assert (finished["id"], finished["status"], finished["error"]) == (rollout.id, "failed", "nope")


def test_client_wait_loops_over_short_server_polls(tmp_path: Path) -> None:
    auth = TokenAuthority.generate()
    backing = SQLiteStore(tmp_path / "short.db")
    app = create_store_app(backing, auth, max_wait_s=0.1)
    with serve_app(app) as base_url, StoreClient(base_url, auth.admin_token) as client:
        (rollout,) = client.enqueue([RolloutRequest(task=Task())])
        assert client.wait_for([rollout.id], timeout=0.3) == []

        def cancel() -> None:
            time.sleep(0.5)
            backing.update_status(rollout.id, RolloutStatus.cancelled)

        canceller = threading.Thread(target=cancel, daemon=True)
        canceller.start()
        (finished,) = client.wait_for([rollout.id])
        canceller.join()
        assert finished.status == RolloutStatus.cancelled
    backing.close()
