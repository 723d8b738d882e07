from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.gateway.fake_upstream import Behaviour, create_fake_upstream
from tests.helpers import serve_app
from tether.auth import TokenAuthority
from tether.gateway import (
    EngineUpstream,
    Gateway,
    GatewayConfig,
    HTTPUpstream,
    HTTPUpstreamConfig,
    create_gateway_app,
)
from tether.store import SQLiteStore


@dataclass
class GatewayRig:
    url: str
    gateway: Gateway
    store: SQLiteStore
    auth: TokenAuthority
    behaviour: Behaviour

    def session(self) -> tuple[str, str, str]:
        """Open a running rollout; returns (rollout id, base URL, API key) as an agent would get them."""
        rollout_id = self.store.start_session({"question": "q"}).rollout.id
        creds = self.gateway.credentials(rollout_id)
        return rollout_id, creds["base_url"], creds["api_key"]


@pytest.fixture
def behaviour() -> Behaviour:
    return Behaviour()


@pytest.fixture
def upstream_url(behaviour: Behaviour) -> Iterator[str]:
    with serve_app(create_fake_upstream(behaviour)) as url:
        yield url + "/v1"


def make_rig(
    tmp_path: Path, upstream_url: str, behaviour: Behaviour, **upstream_options: object
) -> Iterator[GatewayRig]:
    store = SQLiteStore(tmp_path / "store.db")
    auth = TokenAuthority.generate()
    gateway = Gateway(store, auth, GatewayConfig(hold_limit_s=30))
    options = {"request_token_ids": True, "backoff_s": 0.01, "max_retries": 2, **upstream_options}
    gateway.add_upstream(HTTPUpstream(HTTPUpstreamConfig(name="policy", base_url=upstream_url, **options)))
    with serve_app(create_gateway_app(gateway)) as url:
        gateway.config.public_url = url
        yield GatewayRig(url, gateway, store, auth, behaviour)
    store.close()


@pytest.fixture
def rig(tmp_path: Path, upstream_url: str, behaviour: Behaviour) -> Iterator[GatewayRig]:
    yield from make_rig(tmp_path, upstream_url, behaviour)


@pytest.fixture(scope="session")
def tiny_engine() -> Iterator[object]:
    from tether.engines import TransformersEngine

    engine = TransformersEngine("tiny-random", max_batch_size=8)
    yield engine
    engine.close()


@pytest.fixture
def engine_rig(tmp_path: Path, tiny_engine: object) -> Iterator[GatewayRig]:
    store = SQLiteStore(tmp_path / "store.db")
    auth = TokenAuthority.generate()
    gateway = Gateway(store, auth)
    gateway.add_upstream(EngineUpstream(tiny_engine, name="policy"))  # type: ignore[arg-type]
    gateway.aclose = gateway.recorder.close  # type: ignore[method-assign]  # the engine outlives this rig
    with serve_app(create_gateway_app(gateway)) as url:
        gateway.config.public_url = url
        yield GatewayRig(url, gateway, store, auth, Behaviour())
    store.close()
