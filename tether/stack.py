"""The local stack: the gateway on a background loopback server, in front of a store, with the recovery
sweeper running. `tether rollout`, `tether train` and `tether optimize-prompt` drive agents through it.

    with local_stack(store, authority, [policy_upstream]) as stack:
        runner = Runner(store, agent, stack.endpoints, evaluator, config, run=name)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass

from tether.compose import create_app
from tether.contracts import DEFAULT_HEARTBEAT_TIMEOUT_S, DEFAULT_MAX_TOKENS_CAP, DEFAULT_N_CAP
from tether.gateway import Gateway, GatewayConfig
from tether.gateway.server import BackgroundServer
from tether.gateway.upstreams import Upstream
from tether.limits import AgentQuota
from tether.runner.pool import AgentEndpoints
from tether.store.auth import TokenAuthority
from tether.store.base import Store
from tether.store.recovery import StaleSweeper


@dataclass
class LocalStack:
    gateway: Gateway
    url: str
    endpoints: AgentEndpoints
    sweeper: StaleSweeper
    server: BackgroundServer

    @asynccontextmanager
    async def paused(self) -> AsyncIterator[None]:
        """Model calls held and in-flight ones drained (a weight swap), in process, on the gateway's loop:
        every recorded call then names the version that really produced it."""
        await self.server.call(self.gateway.pause(drain=True))
        try:
            yield
        finally:
            await self.server.call(self.gateway.resume())


@contextmanager
def local_stack(
    store: Store,
    authority: TokenAuthority,
    upstreams: Sequence[Upstream],
    *,
    routes: dict[str, str] | None = None,
    hold_limit_s: float = 300.0,
    heartbeat_timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S,
    host: str = "127.0.0.1",
    agent_quota: AgentQuota | None = None,
    caps: tuple[int, int] = (DEFAULT_MAX_TOKENS_CAP, DEFAULT_N_CAP),
) -> Iterator[LocalStack]:
    """`host` is where the gateway listens, and the host in the URL agents get: loopback unless told.
    Workers on other nodes (`--ray`) need a routable one: the advertised host. `agent_quota`: what an
    agent may send (request bodies, spans per attempt); `caps`: the tokens and the choices one call may ask
    for."""
    max_tokens_cap, n_cap = caps
    config = GatewayConfig.for_agents(
        agent_quota or AgentQuota(), hold_limit_s=hold_limit_s, max_tokens_cap=max_tokens_cap, n_cap=n_cap
    )
    if routes is not None:
        config.routes = dict(routes)
    gateway = Gateway(store, authority, config)
    for upstream in upstreams:
        gateway.add_upstream(upstream)
    sweeper = StaleSweeper(store, heartbeat_timeout_s)
    sweeper.start()  # sweeps first: what a killed earlier run left running is requeued before any claim
    try:
        server = BackgroundServer(create_app(gateway), host=host)
        with server as url:
            gateway.config.public_url = url
            yield LocalStack(gateway, url, AgentEndpoints(url, authority), sweeper, server)
    finally:
        sweeper.stop()
