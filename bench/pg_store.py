"""The PostgreSQL store against the SQLite one, in the same run: `python -m bench.pg_store [--quick]`.

- In process: rollouts enqueued+claimed, spans and rewards written per second, one record per call (as
  bench/store_bench.py measures SQLite), and rollout end -> waiter knows.
- Through HTTP: the same over the store API on loopback (what the gateway mounts under /store).
- The load test (bench/load_test.py): simulated agents against one gateway process, its store SQLite or
  PostgreSQL; chat calls answered per second are spans written through the gateway, group-committed.

PostgreSQL is a throwaway local cluster (tests/pg.py: fsync off, since it is thrown away; the store's
commits still wait for the server). Needs the server binaries (scripts/ensure_postgres.sh).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.report import Row, render_rows
from bench.store_bench import StoreFigures, measure
from tether.store import SQLiteStore, StoreClient, open_store
from tether.store.auth import TokenAuthority
from tether.store.base import Store

SECTION = "PostgreSQL store vs SQLite (ours vs ours)"


@dataclass
class Sizes:
    n: int
    wake_samples: int
    agents: int
    load_seconds: float

    @classmethod
    def of(cls, quick: bool) -> Sizes:
        return cls(300, 10, 256, 20) if quick else cls(2000, 30, 256, 60)


def progress(message: str) -> None:
    print(f"[bench.pg_store {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def in_process(open_fresh: Callable[[], Store], sizes: Sizes) -> StoreFigures:
    store = open_fresh()
    try:
        return measure(store, store, sizes.n, sizes.wake_samples)  # type: ignore[arg-type]
    finally:
        store.close()


def over_http(open_fresh: Callable[[], Store], sizes: Sizes) -> StoreFigures:
    from tether.gateway.server import BackgroundServer
    from tether.store.server import create_store_app

    store = open_fresh()
    auth = TokenAuthority.generate()
    try:
        with BackgroundServer(create_store_app(store, auth)) as url:
            with StoreClient(url, auth.admin_token) as client:
                return measure(client, store, sizes.n, sizes.wake_samples)  # type: ignore[arg-type]
    finally:
        store.close()


def _store_rows(where: str, pg: StoreFigures, lite: StoreFigures) -> list[Row]:
    fields = [
        ("rollouts enqueued+claimed", "rollouts_per_s", "/s", True),
        ("spans written", "spans_per_s", "/s", True),
        ("rewards written", "rewards_per_s", "/s", True),
        ("rollout end -> waiter knows, p50", "wake_p50_ms", "ms", False),
    ]
    return [
        Row(
            SECTION,
            f"{label}, {where}",
            unit,
            getattr(pg, attr),
            {"SQLite": getattr(lite, attr)},
            None,
            higher,
        )
        for label, attr, unit, higher in fields
    ]


def _load_rows(agents: int, seconds: float, pg_url: str) -> list[Row]:
    from bench import load_test
    from bench.suite import FakeUpstream

    results = {}
    with FakeUpstream() as upstream:
        for name, url in (("SQLite", None), ("PostgreSQL", pg_url)):
            progress(f"load test, {agents} agents, {seconds:.0f} s, {name} ...")
            results[name] = load_test.run(agents, seconds, upstream.url, url)
    pg, lite = results["PostgreSQL"], results["SQLite"]
    section = f"{SECTION}: load test, {agents} agents, {seconds:.0f} s each"

    def note(result: load_test.LoadResult) -> str:
        return (
            f"{result.calls} calls / {result.spans_stored} spans, {result.rewards} rewards / "
            f"{result.rewards_stored} rows, {result.sessions} sessions"
        )

    rows = [
        Row(section, "chat calls answered (= spans written through the gateway)", "/s",
            pg.calls / pg.seconds, {"SQLite": lite.calls / lite.seconds}, None, True),
        Row(section, "errors", "", float(len(pg.errors)), {"SQLite": float(len(lite.errors))}),
        Row(section, "lost records", "", float(pg.lost), {"SQLite": float(lite.lost)},
            note=f"PostgreSQL {note(pg)}; SQLite {note(lite)}"),
        Row(section, "p99 chat latency", "ms", pg.p99_ms, {"SQLite": lite.p99_ms}),
    ]  # fmt: skip
    for name, result in results.items():
        if result.errors:
            progress(f"{name}: first errors: {'; '.join(result.errors[:3])}")
    return rows


def run(sizes: Sizes) -> list[Row]:
    from tests.pg import cluster

    folder = Path(tempfile.mkdtemp(prefix="tether-bench-pg-"))
    rows: list[Row] = []
    with cluster() as pg:
        counter = iter(range(1_000_000))

        def fresh_pg() -> Store:
            return open_store(pg.create_database())

        def fresh_sqlite() -> Store:
            return SQLiteStore(folder / f"store-{next(counter)}.db")

        for where, measure_one in (("in process", in_process), ("over HTTP", over_http)):
            progress(f"store, {where} ...")
            lite = measure_one(fresh_sqlite, sizes)
            postgres = measure_one(fresh_pg, sizes)
            rows += _store_rows(where, postgres, lite)
        rows += _load_rows(sizes.agents, sizes.load_seconds, pg.create_database())
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pg_store", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small N and 20 s load tests")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    rows = run(Sizes.of(args.quick))
    print(
        render_rows(rows)
        .replace("ours (Tether)", "PostgreSQL")
        .replace("theirs (Agent Lightning / TRL)", "SQLite")
    )
    progress(f"done in {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
