"""Schemathesis against the store's and the gateway's OpenAPI schemas, with the admin token: whatever
the schema allows (and a good deal it does not), no answer is a 5xx.

Left out: the long-poll `/store/rollouts/wait` on the gateway (it waits up to a minute there; the store
app is built with a short wait instead) and `/admin/pause` (it pauses every later model call).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

from tests.gateway.fake_upstream import Behaviour, create_fake_upstream
from tests.helpers import serve_app
from tether.compose import create_app
from tether.gateway import Gateway, GatewayConfig, HTTPUpstream, HTTPUpstreamConfig
from tether.store import SQLiteStore
from tether.store.auth import TokenAuthority
from tether.store.server import create_store_app

AUTH = TokenAuthority.generate()
ADMIN = {"Authorization": f"Bearer {AUTH.admin_token}"}
FUZZ = settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), database=None)


@pytest.fixture(scope="module")
def store_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[schemathesis.BaseSchema]:
    store = SQLiteStore(Path(tmp_path_factory.mktemp("fuzz-store")) / "store.db")
    store.start_session({"q": "seed"})
    yield schemathesis.openapi.from_asgi("/openapi.json", create_store_app(store, AUTH, max_wait_s=0.05))
    store.close()


@pytest.fixture(scope="module")
def gateway_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[schemathesis.BaseSchema]:
    store = SQLiteStore(Path(tmp_path_factory.mktemp("fuzz-gateway")) / "store.db")
    store.start_session({"q": "seed"})
    gateway = Gateway(store, AUTH, GatewayConfig(hold_limit_s=1))
    with serve_app(create_fake_upstream(Behaviour())) as upstream:
        config = HTTPUpstreamConfig(name="policy", base_url=upstream + "/v1", max_retries=0, timeout_s=5)
        gateway.add_upstream(HTTPUpstream(config))
        schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(gateway))
        yield schema.exclude(path="/store/rollouts/wait").exclude(path="/admin/pause")
    gateway.recorder.close()
    store.close()


def fuzz(schema: schemathesis.BaseSchema) -> int:
    """Every operation of the schema, a few generated cases each; returns how many operations ran."""
    count = 0
    for result in schema.get_all_operations():
        operation = result.ok()

        @FUZZ
        @given(case=operation.as_strategy())
        def no_server_error(case: schemathesis.Case) -> None:
            case.call_and_validate(headers=ADMIN, checks=[not_a_server_error])

        no_server_error()
        count += 1
    return count


def test_store_api_never_answers_5xx(store_schema: schemathesis.BaseSchema) -> None:
    assert fuzz(store_schema) >= 15


def test_gateway_api_never_answers_5xx(gateway_schema: schemathesis.BaseSchema) -> None:
    assert fuzz(gateway_schema) >= 25
