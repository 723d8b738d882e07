"""Slow clients are not held open without limit: a connection that sends part of a request's headers, or
of its body, and then stalls is closed once its timeout is up; one that sends endless headers is refused.
Raw sockets against the real server (short timeouts, so the test is quick)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from tests.gateway.fake_upstream import Behaviour, create_fake_upstream
from tests.helpers import serve_app
from tests.serve_process import serve_process
from tether.compose import create_app
from tether.gateway import Gateway
from tether.gateway.server import MAX_HEADER_BYTES, BackgroundServer, ClientTimeouts
from tether.store import SQLiteStore
from tether.store.auth import TokenAuthority

TIMEOUT_S = 0.5
# How long the test waits for the server to close: far more than its timeout, so never a race.
PATIENCE_S = 30.0


@dataclass
class Served:
    url: str
    gateway: Gateway


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    store = SQLiteStore(tmp_path / "store.db")
    gateway = Gateway(store, TokenAuthority.generate())
    timeouts = ClientTimeouts(header_s=TIMEOUT_S, body_s=TIMEOUT_S)
    with BackgroundServer(create_app(gateway), timeouts=timeouts) as url:
        yield Served(url, gateway)
    store.close()


@pytest.fixture
def server_url(served: Served) -> str:
    return served.url


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.settimeout(PATIENCE_S)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a timeout here fails the test)."""
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def test_a_connection_that_never_sends_is_closed(server_url: str) -> None:
    with connect(server_url) as sock:
        assert read_until_closed(sock).startswith(b"HTTP/1.1 408")


def test_stalled_headers_are_closed_with_a_408(server_url: str) -> None:
    with connect(server_url) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Ty")
        assert read_until_closed(sock).startswith(b"HTTP/1.1 408")


def test_a_stalled_body_is_closed(served: Served) -> None:
    rollout_id = served.gateway.store.start_session().rollout.id
    token = served.gateway.auth.rollout_token(rollout_id, 1)
    with connect(served.url) as sock:
        head = f"POST /rollouts/{rollout_id}/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
        head += f"Authorization: Bearer {token}\r\nContent-Length: 100\r\n\r\n"
        sock.sendall(head.encode() + b'{"model": ')
        # Closed with nothing answered: the call, waiting for its body, saw the client go.
        assert read_until_closed(sock) == b""


def test_a_slow_next_request_on_a_kept_alive_connection_is_closed(server_url: str) -> None:
    with connect(server_url) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHo")
        assert read_until_closed(sock).startswith(b"HTTP/1.1 408")


def test_endless_headers_are_refused(server_url: str) -> None:
    with connect(server_url) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        filler = b"X-Filler: " + b"a" * 1000 + b"\r\n"
        try:
            for _ in range(MAX_HEADER_BYTES // len(filler) + 2):
                sock.sendall(filler)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before everything was sent
        assert read_until_closed(sock).startswith(b"HTTP/1.1 431")


def test_prompt_clients_are_served(server_url: str) -> None:
    with httpx.Client(base_url=server_url) as client:
        for _ in range(3):  # one kept-alive connection
            assert client.get("/healthz").status_code == 200


@pytest.fixture
def upstream_behaviour() -> Behaviour:
    return Behaviour()


@pytest.fixture
def upstream_url(upstream_behaviour: Behaviour) -> Iterator[str]:
    with serve_app(create_fake_upstream(upstream_behaviour)) as url:
        yield url + "/v1"


def test_tether_serve_applies_its_limit_options(
    tmp_path: Path, upstream_url: str, upstream_behaviour: Behaviour
) -> None:
    options = ["--header-timeout", str(TIMEOUT_S), "--max-tokens-cap", "64", "--n-cap", "2"]
    with serve_process(tmp_path / "project", "--upstream", upstream_url, *options) as served:
        with connect(served.url) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHo")
            assert read_until_closed(sock).startswith(b"HTTP/1.1 408")
        llm = openai.OpenAI(base_url=served.base_url, api_key=served.api_key, max_retries=0)
        messages = [{"role": "user", "content": "hi"}]
        llm.chat.completions.create(model="policy", messages=messages, max_tokens=65)
        with pytest.raises(openai.BadRequestError, match="'n' is 3, above this gateway's cap of 2"):
            llm.chat.completions.create(model="policy", messages=messages, n=3)
        llm.chat.completions.create(model="policy", messages=messages, max_tokens=64, n=2)
        assert [r["max_tokens"] for r in upstream_behaviour.requests] == [64, 64]  # 65 lowered to the cap
