from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import serve_app
from tether.compose import create_app
from tether.gateway import Gateway
from tether.store import SQLiteStore
from tether.store.auth import TokenAuthority
from tether.tracing import configure, create_otlp_router

AGENT_TIMEOUT_S = 30


@dataclass
class Agent:
    rollout_id: str
    token: str
    env: dict[str, str]


@dataclass
class TracingRig:
    url: str
    store: SQLiteStore
    auth: TokenAuthority
    http: httpx.Client

    def rollout(self) -> tuple[str, str]:
        """A running rollout and its token."""
        rollout_id = self.store.start_session({"question": "q"}).rollout.id
        return rollout_id, self.auth.rollout_token(rollout_id, 1)

    def agent(self) -> Agent:
        """A running rollout and the environment Tether gives the agent it runs."""
        rollout_id, token = self.rollout()
        root = f"{self.url}/rollouts/{rollout_id}"
        env = {
            "OPENAI_BASE_URL": f"{root}/v1",
            "OPENAI_API_KEY": token,
            "TETHER_ROLLOUT_ID": rollout_id,
            "TETHER_URL": root,
            "TETHER_SERVER": self.url,
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{root}/v1/traces",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS": f"Authorization=Bearer%20{token}",
        }
        return Agent(rollout_id, token, env)


class SwappableStore:
    """Delegates to `target`, so one running server can serve a fresh store to each test."""

    def __init__(self) -> None:
        self.target: SQLiteStore | None = None

    def __getattr__(self, name: str) -> Any:
        if self.target is None:
            raise RuntimeError("no store is being served")
        return getattr(self.target, name)


@dataclass
class Server:
    url: str
    auth: TokenAuthority
    backing: SwappableStore
    http: httpx.Client


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    """The gateway app with the OTLP router, served once per module (building the app is slowish)."""
    auth = TokenAuthority.generate()
    backing = SwappableStore()
    app = create_app(Gateway(backing, auth))  # type: ignore[arg-type]
    app.include_router(create_otlp_router(backing, auth))  # type: ignore[arg-type]
    with serve_app(app) as url, httpx.Client(base_url=url, timeout=10) as http:
        yield Server(url, auth, backing, http)


@pytest.fixture
def rig(server: Server, tmp_path: Path) -> Iterator[TracingRig]:
    """The module's server, serving a fresh SQLite store (span ids are unique per store)."""
    store = SQLiteStore(tmp_path / "store.db")
    server.backing.target = store
    yield TracingRig(server.url, store, server.auth, server.http)
    server.backing.target = None
    store.close()


@pytest.fixture(autouse=True)
def clean_tracer(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("TETHER_SERVER", "TETHER_ROLLOUT_ID", "OPENAI_API_KEY", "TETHER_URL"):
        monkeypatch.delenv(name, raising=False)
    configure()
    yield
    configure()


def run_agent(script: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run an agent script as Tether would: a separate process with the rollout's environment."""
    full_env = {key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "TETHER_"))}
    full_env |= env | {"OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none"}
    result = subprocess.run(
        [sys.executable, str(script)], env=full_env, capture_output=True, text=True, timeout=AGENT_TIMEOUT_S
    )
    assert result.returncode == 0, result.stderr
    return result
