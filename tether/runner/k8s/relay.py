"""A TCP relay from the address pods connect to (`--agent-listen`) to the gateway on loopback.

The gateway itself stays on 127.0.0.1; only this relay listens where the cluster can reach, and only
while the run lasts. Each connection is piped both ways, byte for byte.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from urllib.parse import urlsplit

from tether.runner.splice import splice


class Relay:
    def __init__(self, host: str, port: int, target_url: str) -> None:
        target = urlsplit(target_url)
        self.host, self.port = host, port
        self.target_host = target.hostname or "127.0.0.1"
        self.target_port = target.port or 80
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        try:
            connection = functools.partial(splice, host=self.target_host, port=self.target_port)
            self._server = await asyncio.start_server(connection, self.host, self.port)
        except OSError as exc:
            raise OSError(
                f"--agent-listen {self.host}:{self.port}: cannot listen ({exc.strerror or exc}); "
                "pick a free port and the same one in --agent-url"
            ) from None

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None
