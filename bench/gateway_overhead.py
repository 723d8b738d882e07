"""Gateway overhead over a fast fake upstream, as ratios against calling the upstream directly.

    .venv/bin/python -m bench.gateway_overhead [--calls 2000] [--clients 16]

Everything runs on this machine in separate processes: the fake upstream (aiohttp, 512 prompt / 128
response token ids with logprobs), the Tether gateway (uvicorn, durable SQLite recording), a floor proxy
(a bare aiohttp pass-through proxy that records nothing: the least any proxy in Python adds here), and
the load generator. Reported: p50/p99 latency with 1 client and throughput with N clients, direct, through
the floor proxy and through the gateway; the gateway's resident memory before and after (RSS growth per
recorded call: what the process keeps in memory); and the store file's growth per recorded call (what a
call costs on disk: store.db after a WAL checkpoint, over the span rows added).

The three targets are measured in turn, `--rounds` times, and each figure is the median over rounds, so
that a burst of other work on the machine skews one round rather than one column.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson

PROMPT_IDS = list(range(1000, 1512))
RESPONSE_IDS = list(range(2000, 2128))
BODY = {"model": "policy", "messages": [{"role": "user", "content": "hello " * 50}], "max_tokens": 128}


def fake_upstream_main(port: int) -> None:
    from aiohttp import web

    response = orjson.dumps(
        {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "prompt_token_ids": PROMPT_IDS,
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "length",
                    "token_ids": RESPONSE_IDS,
                    "message": {"role": "assistant", "content": "word " * 128},
                    "logprobs": {
                        "content": [{"token": "word", "logprob": -0.5, "bytes": None, "top_logprobs": []}]
                        * 128
                    },
                }
            ],
            "usage": {"prompt_tokens": 512, "completion_tokens": 128, "total_tokens": 640},
        }
    )

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=response, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def floor_proxy_main(port: int, upstream: str) -> None:
    """A bare pass-through proxy: forward the body, return the answer, record nothing."""
    from aiohttp import web

    target = upstream.rstrip("/") + "/chat/completions"

    async def session_context(app: web.Application) -> AsyncIterator[None]:
        app["session"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        yield
        await app["session"].close()

    async def chat(request: web.Request) -> web.Response:
        body = await request.read()
        headers = {"Content-Type": "application/json"}
        async with request.app["session"].post(target, data=body, headers=headers) as answer:
            data = await answer.read()
        return web.Response(body=data, status=answer.status, content_type="application/json")

    app = web.Application()
    app.cleanup_ctx.append(session_context)
    app.router.add_post("/rollouts/{rollout_id}/v1/chat/completions", chat)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def gateway_main(port: int, upstream: str, project: str, store_url: str | None = None) -> None:
    import uvicorn

    from tether.compose import create_app
    from tether.gateway import Gateway, HTTPUpstream, HTTPUpstreamConfig
    from tether.store import open_store
    from tether.store.auth import TokenAuthority

    store = open_store(store_url or Path(project) / "store.db")
    auth = TokenAuthority.load_or_create(Path(project) / "secret")
    gateway = Gateway(store, auth)
    gateway.add_upstream(HTTPUpstream(HTTPUpstreamConfig("policy", upstream, request_token_ids=True)))
    claim = store.start_session()
    (Path(project) / "creds").write_text(
        f"{claim.rollout.id}\n{auth.rollout_token(claim.rollout.id, claim.attempt.number)}\n"
    )
    uvicorn.run(create_app(gateway), host="127.0.0.1", port=port, log_level="error", access_log=False)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_port(port: int) -> None:
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {port}")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def load(url: str, key: str, calls: int, clients: int) -> tuple[list[float], float]:
    latencies: list[float] = []
    payload = orjson.dumps(BODY)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    remaining = calls

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                started = time.perf_counter()
                async with session.post(url, data=payload, headers=headers) as response:
                    await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"HTTP {response.status}")
                latencies.append(time.perf_counter() - started)

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        return latencies, calls / (time.perf_counter() - began)


def store_on_disk(db: Path) -> tuple[int, int]:
    """(bytes, span rows) of a SQLite store file, after checkpointing its WAL into it, so that the bytes
    are the database's own pages (SQLite never shrinks the file: its growth is what the rows took)."""
    with sqlite3.connect(db, timeout=30) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        spans = int(conn.execute("SELECT COUNT(*) FROM spans").fetchone()[0])
    wal = db.with_name(db.name + "-wal")
    return db.stat().st_size + (wal.stat().st_size if wal.exists() else 0), spans


def kib_per_record(before: tuple[int, int], after: tuple[int, int]) -> float:
    records = after[1] - before[1]
    return (after[0] - before[0]) / 1024 / records if records > 0 else float("nan")


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    up_port, floor_port, gw_port = free_port(), free_port(), free_port()
    project = tempfile.mkdtemp(prefix="tether-bench-")
    here = [sys.executable, "-c"]
    upstream_url = f"http://127.0.0.1:{up_port}/v1"
    upstream = subprocess.Popen(
        [*here, f"from bench.gateway_overhead import *; fake_upstream_main({up_port})"]
    )
    floor = subprocess.Popen(
        [*here, f"from bench.gateway_overhead import *; floor_proxy_main({floor_port}, {upstream_url!r})"]
    )
    gateway = subprocess.Popen(
        [
            *here,
            f"from bench.gateway_overhead import *; gateway_main({gw_port}, {upstream_url!r}, {project!r})",
        ]
    )
    names = ("direct", "floor", "gateway")
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in names}
    try:
        for port in (up_port, floor_port, gw_port):
            wait_port(port)
        rollout_id, key = (Path(project) / "creds").read_text().split()
        path = f"/rollouts/{rollout_id}/v1/chat/completions"
        urls = {
            "direct": f"http://127.0.0.1:{up_port}/v1/chat/completions",
            "floor": f"http://127.0.0.1:{floor_port}{path}",
            "gateway": f"http://127.0.0.1:{gw_port}{path}",
        }
        for name in ("floor", "gateway"):
            asyncio.run(load(urls[name], key, 200, 4))  # warm-up
        rss_before = rss_mib(gateway.pid)
        disk_before = store_on_disk(Path(project) / "store.db")
        for _ in range(args.rounds):
            for name in names:
                single, _ = asyncio.run(load(urls[name], key, args.calls // 4, 1))
                _, throughput = asyncio.run(load(urls[name], key, args.calls, args.clients))
                results[name].append((percentile(single, 50), percentile(single, 99), throughput))
        rss_after = rss_mib(gateway.pid)
        disk_after = store_on_disk(Path(project) / "store.db")
    finally:
        for process in (gateway, floor, upstream):
            process.terminate()
            process.wait(timeout=30)
    d50, d99, dtp = (statistics.median(values) for values in zip(*results["direct"], strict=True))
    f50, f99, ftp = (statistics.median(values) for values in zip(*results["floor"], strict=True))
    g50, g99, gtp = (statistics.median(values) for values in zip(*results["gateway"], strict=True))
    print(
        "| | direct | floor: bare pass-through proxy, no recording | through gateway | gateway vs direct "
        "| gateway vs floor |\n|---|---|---|---|---|---|"
    )
    print(
        f"| p50 latency, 1 client (ms) | {d50:.2f} | {f50:.2f} | {g50:.2f} "
        f"| {g50 / d50:.2f}x (+{g50 - d50:.2f} ms) | {g50 / f50:.2f}x (+{g50 - f50:.2f} ms) |"
    )
    print(
        f"| p99 latency, 1 client (ms) | {d99:.2f} | {f99:.2f} | {g99:.2f} "
        f"| {g99 / d99:.2f}x | {g99 / f99:.2f}x |"
    )
    print(
        f"| throughput, {args.clients} clients (req/s) | {dtp:.0f} | {ftp:.0f} | {gtp:.0f} "
        f"| {gtp / dtp:.2f}x | {gtp / ftp:.2f}x |"
    )
    recorded = args.rounds * (args.calls + args.calls // 4)
    print(
        f"\nmedians of {args.rounds} rounds; gateway RSS {rss_before:.0f} MiB before, "
        f"{rss_after:.0f} MiB after {recorded} recorded calls "
        f"({(rss_after - rss_before) * 1024 / recorded:.2f} KiB RSS growth per call)"
    )
    print(
        f"store file {disk_before[0] / 2**20:.1f} MiB -> {disk_after[0] / 2**20:.1f} MiB for "
        f"{disk_after[1] - disk_before[1]} span rows ({kib_per_record(disk_before, disk_after):.2f} KiB on "
        "disk per recorded call; store.db after a WAL checkpoint)"
    )
    print(f"cpu cores: {os.cpu_count()}")


if __name__ == "__main__":
    main()
