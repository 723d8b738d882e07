"""Durable span recording with group commits.

Request handlers hand their span to one writer thread and await its commit. The writer takes
everything that queued up while the previous commit ran and writes it in one transaction, so under
load many calls share one commit, and an answered call is always on disk before its answer leaves.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from dataclasses import dataclass

from tether.store.base import Store
from tether.store.models import Span

MAX_BATCH = 1024


@dataclass
class _Pending:
    span: Span
    future: asyncio.Future[None]
    loop: asyncio.AbstractEventLoop


def _resolve(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


class SpanRecorder:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="tether-span-writer", daemon=True)
        self._thread.start()
        self.batches = 0
        self.recorded = 0

    async def record(self, span: Span) -> None:
        """Return once the span is committed; raise the store's error if it could not be."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._queue.put(_Pending(span, future, loop))
        await asyncio.shield(future)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stop = False
            while len(batch) < MAX_BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                batch.append(item)
            self._commit(batch)
            if stop:
                return

    def _commit(self, batch: list[_Pending]) -> None:
        error: BaseException | None = None
        try:
            self._store.add_spans([pending.span for pending in batch])
            self.batches += 1
            self.recorded += len(batch)
        except Exception as exc:  # the store's error goes back to every waiting call
            error = exc
        for pending in batch:
            try:
                pending.loop.call_soon_threadsafe(_resolve, pending.future, error)
            except RuntimeError:  # the caller's loop is closed
                continue

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=10)
