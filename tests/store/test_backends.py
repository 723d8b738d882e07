"""`open_store(url)` picks the backend: file paths and sqlite:/// URLs, memory:, http(s) servers; an
unknown scheme or an unreachable server is a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import serve_app
from tether.store import RolloutRequest, StoreError, StoreOptions, StoreURLError, Task, open_store
from tether.store.auth import TokenAuthority
from tether.store.client import StoreClient
from tether.store.server import create_store_app
from tether.store.sqlite import SQLiteStore


def test_paths_and_sqlite_urls_open_the_same_file(tmp_path: Path) -> None:
    first = open_store(tmp_path / "a.db")
    (rollout,) = first.enqueue([RolloutRequest(task=Task(id="t"))])
    first.close()
    for url in (str(tmp_path / "a.db"), f"sqlite:///{tmp_path / 'a.db'}"):
        store = open_store(url)
        assert isinstance(store, SQLiteStore) and store.get_rollout(rollout.id).task_id == "t"
        store.close()
    relative = open_store("sqlite://sub/b.db", StoreOptions(project_dir=tmp_path))
    relative.close()
    assert (tmp_path / "sub" / "b.db").is_file()


def test_the_default_is_the_environment_then_the_project_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TETHER_STORE", raising=False)
    open_store(options=StoreOptions(project_dir=tmp_path)).close()
    assert (tmp_path / ".tether" / "store.db").is_file()
    monkeypatch.setenv("TETHER_STORE", "memory:")
    memory = open_store(options=StoreOptions(project_dir=tmp_path))
    assert isinstance(memory, SQLiteStore) and memory.path == ":memory:"
    (rollout,) = memory.enqueue([RolloutRequest(task=Task(id="scratch"))])
    # nothing reaches the project file, and another memory store is empty
    for other in (
        SQLiteStore(tmp_path / ".tether" / "store.db"),
        open_store(options=StoreOptions(project_dir=tmp_path)),
    ):
        assert other.list_rollouts(limit=10) == []
        other.close()
    assert memory.get_rollout(rollout.id).task_id == "scratch"
    memory.close()


def test_http_urls_open_a_client_of_a_running_server(tmp_path: Path) -> None:
    auth = TokenAuthority.generate()
    backing = SQLiteStore(tmp_path / "served.db")
    with serve_app(create_store_app(backing, auth)) as url:
        client = open_store(url, StoreOptions(token=auth.admin_token))
        assert isinstance(client, StoreClient)
        (rollout,) = client.enqueue([RolloutRequest(task=Task(id="remote"))])
        assert backing.get_rollout(rollout.id).task_id == "remote"
        with pytest.raises(StoreError, match="invalid token"):
            open_store(url, StoreOptions(token="tadm-wrong"))


def test_unknown_schemes_and_dead_servers_are_clear_errors() -> None:
    with pytest.raises(StoreURLError, match="unknown store URL scheme 'redis'.*memory:"):
        open_store("redis://localhost:6379")
    with pytest.raises(StoreError, match="cannot reach the store at http://127.0.0.1:9"):
        open_store("http://127.0.0.1:9", StoreOptions(token="tadm-x"))
