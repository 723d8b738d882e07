"""Helpers shared by the test suites."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

STARTUP_TIMEOUT_S = 10.0
SHUTDOWN_TIMEOUT_S = 10.0


def _bound_socket(host: str) -> socket.socket:
    # An explicit IPPROTO_TCP makes asyncio set TCP_NODELAY on accepted connections (it checks the
    # protocol number); without it every response waits ~40 ms on Nagle plus delayed ACKs.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    return sock


@contextmanager
def serve_app(app: Any, *, host: str = "127.0.0.1", **config: Any) -> Iterator[str]:
    """Serve an ASGI app with uvicorn on a free loopback port in a background thread; yield its base URL.

    The socket is bound before the server starts, so there is no window in which another process can
    take the port. Extra keyword arguments go to `uvicorn.Config`.
    """
    sock = _bound_socket(host)
    port = sock.getsockname()[1]
    settings: dict[str, Any] = {"log_level": "warning", "timeout_graceful_shutdown": 2} | config
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, **settings))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="serve_app")
    thread.start()
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start on {host}:{port}")
            time.sleep(0.01)
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(SHUTDOWN_TIMEOUT_S)
        if thread.is_alive():
            server.force_exit = True
            thread.join(SHUTDOWN_TIMEOUT_S)
        sock.close()
