"""Run the gateway app with uvicorn: in the foreground (`tether serve`) or in a background thread
(`tether rollout`, `tether train`, which drive agents from the main thread).

Clients are agents under training, so some are adversaries: a connection that sends its request's
headers or body slowly (or never) is closed once its timeout is up, and headers larger than
`MAX_HEADER_BYTES` are refused. uvicorn itself times out only idle keep-alive connections.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from asyncio import TimerHandle
from collections.abc import Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ClassVar, Literal, TypeVar

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from tether.contracts import DEFAULT_BODY_TIMEOUT_S, DEFAULT_HEADER_TIMEOUT_S

STARTUP_TIMEOUT_S = 30.0
MAX_HEADER_BYTES = 64 * 1024


@dataclass(frozen=True)
class ClientTimeouts:
    """How long a client may take to send a request's headers (from its first byte, or from connecting),
    then its body; 0 turns one off. The answer itself takes as long as the call does."""

    header_s: float = DEFAULT_HEADER_TIMEOUT_S
    body_s: float = DEFAULT_BODY_TIMEOUT_S


Phase = Literal["headers", "body"]


class TimedHttpProtocol(HttpToolsProtocol):
    """uvicorn's HTTP protocol, with a deadline on reading each request's headers and then its body.

    The parser's callbacks move the phase; the deadline is armed once the data at hand is parsed, so a
    request that arrives whole (the usual case) never arms one."""

    timeouts: ClassVar[ClientTimeouts] = ClientTimeouts()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: TimerHandle | None = None
        self._phase: Phase | None = None
        self._header_bytes: int | None = None  # of the request whose headers are coming in, if one is
        super().connection_made(transport)
        self._enter("headers")  # from the moment it connects
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._enter(None)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._header_bytes is not None:
            self._header_bytes += len(data)
            if self._header_bytes > MAX_HEADER_BYTES:
                self._refuse(431, b"request headers too large")
        self._arm()

    # httptools parser callbacks, and uvicorn's own at the end of each answer

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_bytes = 0
        if self._phase != "headers":  # from the request's first byte (or since the connection opened)
            self._enter("headers")

    def on_headers_complete(self) -> None:
        self._header_bytes = None
        super().on_headers_complete()
        # A pipelined request waits for the one being answered: its body is timed once it starts.
        self._enter(None if self.pipeline else "body")

    def on_message_complete(self) -> None:
        super().on_message_complete()
        if self._phase == "body":
            self._enter(None)  # the answer takes as long as it takes

    def on_response_complete(self) -> None:
        super().on_response_complete()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete and cycle.more_body:
            self._enter("body")  # a pipelined request, started now, whose body is still to come
            self._arm()

    def _enter(self, phase: Phase | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = phase

    def _arm(self) -> None:
        if self._phase is None or self._deadline is not None or self.transport.is_closing():
            return
        seconds = self.timeouts.header_s if self._phase == "headers" else self.timeouts.body_s
        if seconds > 0:
            self._deadline = self.loop.call_later(seconds, self._expire)

    def _expire(self) -> None:
        self._deadline = None
        if self not in self.connections:  # upgraded to another protocol
            return
        if self._phase == "headers":
            self._refuse(408, b"request headers not received in time")
        elif not self.transport.is_closing():
            self.transport.close()  # the app reading the body sees a disconnect

    def _refuse(self, status: int, reason: bytes) -> None:
        """Answer `status` and close, unless an answer is under way: then just close."""
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:
            phrase = b"Request Timeout" if status == 408 else b"Request Header Fields Too Large"
            self.transport.write(
                b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
                b"connection: close\r\n\r\n%s" % (status, phrase, len(reason), reason)
            )
        self.transport.close()


def server_config(
    app: Any, *, timeouts: ClientTimeouts | None = None, log_level: str = "warning", **options: Any
) -> uvicorn.Config:
    protocol = type("TimedHttpProtocol", (TimedHttpProtocol,), {"timeouts": timeouts or ClientTimeouts()})
    return uvicorn.Config(app, log_level=log_level, http=protocol, **options)


def listen(host: str, port: int) -> socket.socket:
    """Bind and listen now, so the URL is known (port 0 picks a free one) before the server runs."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot bind {host}:{port}: {exc.strerror}") from exc
    sock.listen(2048)
    return sock


def url_of(sock: socket.socket, host: str) -> str:
    port = sock.getsockname()[1]
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


T = TypeVar("T")


class BackgroundServer:
    """`with BackgroundServer(app) as url:` serves the app on loopback from a daemon thread."""

    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        log_level: str = "warning",
        timeouts: ClientTimeouts | None = None,
    ) -> None:
        self.sock = listen(host, port)
        self.url = url_of(self.sock, host)
        config = server_config(app, timeouts=timeouts, log_level=log_level, timeout_graceful_shutdown=5)
        self.server = uvicorn.Server(config)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._run, daemon=True, name="tether-gateway")

    def _run(self) -> None:
        with asyncio.Runner(loop_factory=self.server.config.get_loop_factory()) as runner:
            runner.run(self._serve())

    async def _serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        await self.server.serve(sockets=[self.sock])

    async def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Await `coroutine` on the server's own loop (its thread) from another loop."""
        assert self.loop is not None, "the server is not running"
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self.loop))

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the gateway did not start on {self.url}")
            time.sleep(0.01)
        return self.url

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.server.should_exit = True
        self.thread.join(15)
        self.sock.close()
