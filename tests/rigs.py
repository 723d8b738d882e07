"""Gateways on loopback for tests: a real store, real uvicorn, a fake or the tiny engine upstream."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.gateway.fake_upstream import Behaviour
from tests.helpers import serve_app
from tether.compose import create_app
from tether.gateway import (
    Gateway,
    GatewayConfig,
    HTTPUpstream,
    HTTPUpstreamConfig,
)
from tether.policy_server.builtin import EngineUpstream
from tether.store import SQLiteStore
from tether.store.auth import TokenAuthority


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


def make_rig(
    tmp_path: Path, upstream_url: str, behaviour: Behaviour, **upstream_options: object
) -> Iterator[GatewayRig]:
    store = SQLiteStore(tmp_path / "store.db")
    auth = TokenAuthority.generate()
    gateway = Gateway(store, auth, GatewayConfig(hold_limit_s=30))
    options = {"request_token_ids": True, "backoff_s": 0.01, "max_retries": 2, **upstream_options}
    gateway.add_upstream(HTTPUpstream(HTTPUpstreamConfig(name="policy", base_url=upstream_url, **options)))
    with serve_app(create_app(gateway)) as url:
        gateway.config.public_url = url
        yield GatewayRig(url, gateway, store, auth, behaviour)
    store.close()


def make_engine_rig(tmp_path: Path, tiny_engine: object) -> Iterator[GatewayRig]:
    store = SQLiteStore(tmp_path / "store.db")
    auth = TokenAuthority.generate()
    gateway = Gateway(store, auth)
    gateway.add_upstream(EngineUpstream(tiny_engine, name="policy"))  # type: ignore[arg-type]

    async def close_recorder_only() -> None:  # the session's engine outlives this rig
        gateway.recorder.close()

    gateway.aclose = close_recorder_only  # type: ignore[method-assign]
    with serve_app(create_app(gateway)) as url:
        gateway.config.public_url = url
        yield GatewayRig(url, gateway, store, auth, Behaviour())
    store.close()
