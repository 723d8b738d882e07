"""Load test: many concurrent simulated agents against one gateway process (its store in SQLite, or any
store URL).

Each agent loops until the deadline: open a session (admin API), make a few chat calls through its
rollout's base URL, post a reward, finish the rollout (store API). Afterwards the store's tables are
read directly: every answered call must have its span and every accepted reward its row. The gateway's RSS
is sampled once a second.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson

from bench.gateway_overhead import BODY, free_port, rss_mib, wait_port

CALLS_PER_AGENT = 3


@dataclass
class LoadResult:
    agents: int
    seconds: float
    sessions: int = 0
    calls: int = 0
    rewards: int = 0
    errors: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    rss: list[float] = field(default_factory=list)
    spans_stored: int = 0
    rewards_stored: int = 0

    @property
    def p99_ms(self) -> float:
        return statistics.quantiles(self.latencies, n=100)[98] * 1000 if len(self.latencies) > 1 else 0.0

    @property
    def lost(self) -> int:
        return max(0, self.calls - self.spans_stored) + max(0, self.rewards - self.rewards_stored)

    @property
    def rss_growth_mib(self) -> float:
        """Last tenth of the samples against the second tenth (the first is warm-up)."""
        if len(self.rss) < 10:
            return self.rss[-1] - self.rss[0] if self.rss else 0.0
        tenth = len(self.rss) // 10
        return statistics.median(self.rss[-tenth:]) - statistics.median(self.rss[tenth : 2 * tenth])


async def _check(response: aiohttp.ClientResponse, what: str) -> bytes:
    body = await response.read()
    if response.status != 200:
        raise RuntimeError(f"{what}: HTTP {response.status} {body[:120]!r}")
    return body


async def _agent(
    session: aiohttp.ClientSession, gw: str, admin: str, deadline: float, out: LoadResult
) -> None:
    admin_headers = {"Authorization": f"Bearer {admin}"}
    payload = orjson.dumps(BODY)
    while time.monotonic() < deadline:
        try:
            async with session.post(f"{gw}/admin/sessions", json={}, headers=admin_headers) as r:
                creds = orjson.loads(await _check(r, "session"))
            out.sessions += 1
            rid, key = creds["rollout_id"], creds["api_key"]
            headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
            for _ in range(CALLS_PER_AGENT):
                started = time.perf_counter()
                async with session.post(
                    f"{gw}/rollouts/{rid}/v1/chat/completions", data=payload, headers=headers
                ) as r:
                    await _check(r, "chat")
                out.latencies.append(time.perf_counter() - started)
                out.calls += 1
            async with session.post(
                f"{gw}/rollouts/{rid}/rewards", json={"value": 1.0}, headers=headers
            ) as r:
                await _check(r, "reward")
            out.rewards += 1
            status = {"status": "succeeded", "output": "done"}
            async with session.post(
                f"{gw}/store/rollouts/{rid}/status", json=status, headers=admin_headers
            ) as r:
                await _check(r, "finish")
        except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
            out.errors.append(f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(0.1)


async def _sample_rss(pid: int, deadline: float, out: LoadResult) -> None:
    while time.monotonic() < deadline:
        out.rss.append(rss_mib(pid))
        await asyncio.sleep(1.0)


async def _drive(gw: str, admin: str, pid: int, agents: int, seconds: float, out: LoadResult) -> None:
    deadline = time.monotonic() + seconds
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
        await asyncio.gather(
            _sample_rss(pid, deadline, out),
            *(_agent(session, gw, admin, deadline, out) for _ in range(agents)),
        )


def _count(store_url: str, table: str) -> int:
    from tether.store.tables import open_tables

    tables = open_tables(store_url, Path("."))
    try:
        return tables.count(table)
    finally:
        tables.close()


def run(agents: int, seconds: float, upstream_url: str, store_url: str | None = None) -> LoadResult:
    """`store_url`: the gateway's store (default: a SQLite file in a new temporary project)."""
    from tether.store.auth import TokenAuthority

    project = Path(tempfile.mkdtemp(prefix="tether-load-"))
    store_url = store_url or str(project / "store.db")
    port = free_port()
    code = (
        "from bench.gateway_overhead import *; "
        f"gateway_main({port}, {upstream_url!r}, {str(project)!r}, {store_url!r})"
    )
    gateway = subprocess.Popen([sys.executable, "-c", code])
    out = LoadResult(agents, seconds)
    try:
        wait_port(port)
        admin = TokenAuthority.load_or_create(project / "secret").admin_token
        asyncio.run(_drive(f"http://127.0.0.1:{port}", admin, gateway.pid, agents, seconds, out))
    finally:
        gateway.terminate()
        gateway.wait(timeout=60)
    out.spans_stored = _count(store_url, "spans")
    out.rewards_stored = _count(store_url, "rewards")
    return out
