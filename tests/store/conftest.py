from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import serve_app
from tests.pg import Cluster, cluster
from tether.store.auth import TokenAuthority
from tether.store.base import Store
from tether.store.client import StoreClient
from tether.store.server import create_store_app
from tether.store.sqlite import SQLiteStore

BACKENDS = ["sqlite-file", "sqlite-memory", "http", "postgresql"]
PG_TABLES = "tasks, rollouts, attempts, spans, rewards, resources"


class SwappableStore:
    """Delegates every call to `target`, so one running server can serve a fresh store to each test."""

    def __init__(self) -> None:
        self.target: Store | None = None

    def __getattr__(self, name: str) -> Any:
        if self.target is None:
            raise RuntimeError("no store is being served")
        return getattr(self.target, name)


@dataclass
class StoreServer:
    base_url: str
    auth: TokenAuthority
    backing: SwappableStore

    def client(self, token: str | None = None) -> StoreClient:
        return StoreClient(self.base_url, token or self.auth.admin_token, timeout=10.0)


@pytest.fixture(scope="session")
def store_server() -> Iterator[StoreServer]:
    """One uvicorn store server for the session (building the app and starting uvicorn is slowish)."""
    auth = TokenAuthority.generate()
    backing = SwappableStore()
    with serve_app(create_store_app(backing, auth)) as base_url:  # type: ignore[arg-type]
        yield StoreServer(base_url, auth, backing)


@pytest.fixture
def served(store_server: StoreServer, tmp_path: Path) -> Iterator[tuple[StoreServer, SQLiteStore]]:
    """The session's server, now serving a fresh SQLite file."""
    backing = SQLiteStore(tmp_path / "served.db")
    store_server.backing.target = backing
    yield store_server, backing
    store_server.backing.target = None
    backing.close()


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """One throwaway PostgreSQL server for the session; tests make their own databases in it."""
    with cluster() as running:
        yield running


@pytest.fixture(scope="session")
def pg_shared_url(pg_cluster: Cluster) -> str:
    """A database with the store's schema, emptied before each test that uses it (faster than a new one)."""
    from tether.store.postgres import PostgresStore

    url = pg_cluster.create_database("conformance")
    PostgresStore(url).close()
    return url


@pytest.fixture
def pg_url(pg_cluster: Cluster, pg_shared_url: str) -> str:
    pg_cluster.psql(f"TRUNCATE {PG_TABLES} RESTART IDENTITY", "conformance")
    return pg_shared_url


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite-file":
        local = SQLiteStore(tmp_path / "store.db")
        yield local
        local.close()
    elif request.param == "sqlite-memory":
        memory = SQLiteStore.in_memory()
        yield memory
        memory.close()
    elif request.param == "postgresql":
        from tether.store.postgres import PostgresStore

        database = PostgresStore(request.getfixturevalue("pg_url"))
        yield database
        database.close()
    else:
        server, _ = request.getfixturevalue("served")
        client = server.client()
        yield client
        client.close()
