"""One relayed connection, piped both ways byte for byte: the Kubernetes runner's TCP relay and the
sandbox's Unix-socket relay both hand each accepted connection to `splice`."""

from __future__ import annotations

import asyncio

CHUNK = 64 * 1024


async def splice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, port: int) -> None:
    """Connect to host:port and pipe the accepted connection to it and back until both sides end."""
    try:
        up_reader, up_writer = await asyncio.open_connection(host, port)
    except OSError:
        writer.close()
        return
    await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer), return_exceptions=True)
    for stream in (writer, up_writer):
        stream.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(CHUNK):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()
