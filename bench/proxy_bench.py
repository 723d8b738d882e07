"""Gateway overhead, side by side: direct, the floor proxy, Tether's gateway, Agent Lightning's proxies.

Every target runs in its own process against the same fake upstream (bench/gateway_overhead.py: 512 prompt
/ 128 response token ids, logprobs). Each target gets, in turn: a warm-up, 1-client latency (p50/p99,
interleaved with direct calls to the upstream; the difference is the added latency),
throughput with 16 and with 64 clients, then calls up to the recorded-call count, and its RSS growth per
recorded call (memory the process keeps). For ours, also the store file's growth per recorded call (what a
call costs on disk); the references keep their records in memory, so they have none. Its records are
counted afterwards, so a proxy that silently drops spans shows up.
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.gateway_overhead import (
    free_port,
    kib_per_record,
    load,
    percentile,
    rss_mib,
    store_on_disk,
    wait_port,
)

HERE = Path(__file__).resolve().parent


@dataclass
class Target:
    name: str
    process: subprocess.Popen[bytes]
    url: str  # full chat-completions URL
    key: str
    count: object = None  # () -> int | str: records held, or why not known
    disk: object = None  # () -> (bytes, records) of its store file; None: it keeps nothing on disk


@dataclass
class Figures:
    added_p50_ms: float  # over the upstream called directly, measured interleaved with the target
    added_p99_ms: float
    tput16: float
    tput64: float
    kib_per_call: float  # RSS growth per recorded call
    calls: int
    recorded: int | str
    disk_kib_per_call: float | None = None  # store file growth per recorded call; None: no store file


def _wait_ready(folder: Path, process: subprocess.Popen[bytes], timeout_s: float = 180) -> tuple[str, str]:
    deadline = time.monotonic() + timeout_s
    while not (folder / "ready").exists():
        if process.poll() is not None:
            raise RuntimeError(f"exited with code {process.returncode} before serving (see its stderr)")
        if time.monotonic() > deadline:
            raise RuntimeError(f"not ready after {timeout_s:.0f} s")
        time.sleep(0.1)
    path, key = (folder / "ready").read_text().split()
    return path, key


def _ask_count(folder: Path, timeout_s: float = 120) -> int | str:
    (folder / "count").unlink(missing_ok=True)
    (folder / "count.req").write_text("")
    deadline = time.monotonic() + timeout_s
    while not (folder / "count").exists():
        if time.monotonic() > deadline:
            return "no answer"
        time.sleep(0.1)
    text = (folder / "count").read_text()
    return int(text) if text.isdigit() else text


def _count_retrying(folder: Path, attempts: int = 5) -> int | str:
    """The reference's own query can race its writer threads; a few tries, then its error."""
    answer: int | str = "no answer"
    for _ in range(attempts):
        answer = _ask_count(folder)
        if isinstance(answer, int):
            return answer
        time.sleep(0.5)
    return answer


def start_ours(upstream_url: str) -> Target:
    project = tempfile.mkdtemp(prefix="tether-bench-gw-")
    port = free_port()
    code = f"from bench.gateway_overhead import *; gateway_main({port}, {upstream_url!r}, {project!r})"
    process = subprocess.Popen([sys.executable, "-c", code])
    wait_port(port)
    creds = Path(project) / "creds"
    while not creds.exists():
        time.sleep(0.05)
    rollout_id, key = creds.read_text().split()

    def count() -> int:
        with sqlite3.connect(Path(project) / "store.db") as conn:
            return conn.execute("SELECT COUNT(*) FROM spans").fetchone()[0]

    url = f"http://127.0.0.1:{port}/rollouts/{rollout_id}/v1/chat/completions"
    return Target("ours", process, url, key, count, lambda: store_on_disk(Path(project) / "store.db"))


def start_floor(upstream_url: str) -> Target:
    port = free_port()
    code = f"from bench.gateway_overhead import *; floor_proxy_main({port}, {upstream_url!r})"
    process = subprocess.Popen([sys.executable, "-c", code])
    wait_port(port)
    return Target("floor", process, f"http://127.0.0.1:{port}/rollouts/x/v1/chat/completions", "none")


def start_reference(name: str, python: Path, script: str, upstream_url: str, env: dict[str, str]) -> Target:
    folder = Path(tempfile.mkdtemp(prefix=f"tether-bench-{name}-"))
    port = free_port()
    log = (folder / "stderr").open("wb")
    process = subprocess.Popen(
        [str(python), str(HERE / script), str(port), upstream_url, str(folder)],
        env=env,
        stderr=log,
        stdout=log,
    )
    try:
        path, key = _wait_ready(folder, process)
    except RuntimeError as exc:
        process.kill()
        tail = (folder / "stderr").read_text(errors="replace").strip().splitlines()[-2:]
        raise RuntimeError(f"{exc}: {' | '.join(tail)[-240:]}") from None
    return Target(
        name, process, f"http://127.0.0.1:{port}{path}/chat/completions", key, lambda: _count_retrying(folder)
    )


def stop(target: Target) -> None:
    target.process.terminate()
    try:
        target.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        target.process.kill()
        target.process.wait(timeout=20)


def _interleaved_latency(target: Target, direct_url: str, calls: int) -> tuple[list[float], list[float]]:
    """1-client latencies of the target and of the upstream directly, alternating in chunks of 25 calls,
    so that a burst of other work on the machine lands on both and cancels out of the difference."""
    ours: list[float] = []
    direct: list[float] = []
    while len(ours) < calls:
        chunk = min(25, calls - len(ours))
        direct += asyncio.run(load(direct_url, "x", chunk, 1))[0]
        ours += asyncio.run(load(target.url, target.key, chunk, 1))[0]
    return ours, direct


def measure(
    target: Target, latency_calls: int, throughput_calls: int, recorded_calls: int, direct_url: str
) -> Figures:
    asyncio.run(load(target.url, target.key, 100, 4))  # warm-up
    rss_before = rss_mib(target.process.pid)
    disk_before = target.disk() if callable(target.disk) else None
    single, direct = _interleaved_latency(target, direct_url, latency_calls)
    _, tput16 = asyncio.run(load(target.url, target.key, throughput_calls, 16))
    _, tput64 = asyncio.run(load(target.url, target.key, throughput_calls, 64))
    made = latency_calls + 2 * throughput_calls
    if recorded_calls > made:
        asyncio.run(load(target.url, target.key, recorded_calls - made, 16))
        made = recorded_calls
    rss_after = rss_mib(target.process.pid)
    recorded = target.count() if callable(target.count) else "-"
    disk = kib_per_record(disk_before, target.disk()) if disk_before and callable(target.disk) else None
    return Figures(
        percentile(single, 50) - percentile(direct, 50),
        percentile(single, 99) - percentile(direct, 99),
        tput16,
        tput64,
        (rss_after - rss_before) * 1024 / made,
        made + 100,
        recorded,
        disk,
    )
