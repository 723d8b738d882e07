"""Durable span recording with group commits.

Request handlers hand their span to the recorder and await its commit. The event loop collects spans;
one commit at a time runs on a single writer thread, and every span that arrives while it runs goes
into the next one, as one transaction. So under load many calls share one commit, the loop never
blocks on the store, and an answered call is always on disk before its answer leaves.

A span the store cannot keep (its content, not the store, is at fault) must not fail the other calls of
its commit, which may be other rollouts': such a commit is retried span by span, and only that span's
call fails. Nothing is checked beforehand, so the calls pay nothing for it while all is well.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field

from tether.store.base import InvalidValue, Store, StoreError
from tether.store.records import Span

MAX_BATCH = 1024
# What a store raises for a value it cannot keep: its own InvalidValue, or the serializer's error as is
# (orjson's JSONEncodeError is a TypeError; a store client serializes before it sends).
CONTENT_ERRORS = (InvalidValue, TypeError, ValueError, RecursionError, OverflowError)
# Per span of a commit: None once committed, else why not. None for the whole commit: all committed.
Outcomes = list[BaseException | None] | None


@dataclass(eq=False)
class _Batcher:
    """The spans waiting for a commit on one event loop (a server has one; tests may start several)."""

    loop: asyncio.AbstractEventLoop
    spans: list[Span] = field(default_factory=list)
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    committing: bool = False


class SpanRecorder:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tether-span-writer")
        self._batchers: dict[asyncio.AbstractEventLoop, _Batcher] = {}
        self._lock = threading.Lock()
        self.batches = 0
        self.recorded = 0

    async def record(self, span: Span) -> None:
        """Return once the span is committed; raise the store's error if it could not be."""
        loop = asyncio.get_running_loop()
        batcher = self._batchers.get(loop) or self._batcher(loop)
        future: asyncio.Future[None] = loop.create_future()
        batcher.spans.append(span)
        batcher.waiters.append(future)
        if not batcher.committing:
            batcher.committing = True
            # At the end of this loop iteration, so that spans of calls finishing together share it.
            loop.call_soon(self._flush, batcher)
        # A cancelled caller stops waiting; its span is still committed with the others.
        await future

    def _batcher(self, loop: asyncio.AbstractEventLoop) -> _Batcher:
        with self._lock:
            for old in [old for old in self._batchers if old.is_closed()]:
                del self._batchers[old]
            return self._batchers.setdefault(loop, _Batcher(loop))

    def _flush(self, batcher: _Batcher) -> None:
        spans, waiters = batcher.spans[:MAX_BATCH], batcher.waiters[:MAX_BATCH]
        del batcher.spans[:MAX_BATCH], batcher.waiters[:MAX_BATCH]
        try:
            done = self._executor.submit(self._commit, spans)
        except RuntimeError:  # closed
            self._settle(batcher, waiters, StoreError("the gateway is shutting down: span recording stopped"))
            return
        done.add_done_callback(lambda done: self._committed(batcher, waiters, done))

    def _commit(self, spans: list[Span]) -> Outcomes:
        try:
            self._store.add_spans(spans)
        except CONTENT_ERRORS as exc:
            if len(spans) == 1:
                return [_unstorable(exc)]
            return [self._commit_alone(span) for span in spans]
        self._count(len(spans))
        return None

    def _commit_alone(self, span: Span) -> BaseException | None:
        try:
            self._store.add_spans([span])
        except CONTENT_ERRORS as exc:
            return _unstorable(exc)
        except StoreError as exc:
            return exc
        self._count(1)
        return None

    def _count(self, spans: int) -> None:
        self.batches += 1
        self.recorded += spans

    def _committed(
        self, batcher: _Batcher, waiters: list[asyncio.Future[None]], done: Future[Outcomes]
    ) -> None:
        # On the writer thread: one wake-up of the loop per commit, not one per call.
        error = done.exception()
        outcomes = error if error is not None else done.result()
        try:
            batcher.loop.call_soon_threadsafe(self._settle, batcher, waiters, outcomes)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    def _settle(
        self,
        batcher: _Batcher,
        waiters: list[asyncio.Future[None]],
        outcomes: Outcomes | BaseException,
    ) -> None:
        for index, future in enumerate(waiters):
            if future.done():
                continue
            error = outcomes[index] if isinstance(outcomes, list) else outcomes
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)
        if batcher.spans:
            self._flush(batcher)  # what queued up during this commit: the next group
        else:
            batcher.committing = False

    def close(self) -> None:
        """Let the writer finish the commits handed to it (for up to 10 seconds), then stop it."""
        try:
            last = self._executor.submit(lambda: None)
        except RuntimeError:  # already closed
            return
        self._executor.shutdown(wait=False)
        with suppress(TimeoutError):
            last.result(timeout=10)


def _unstorable(error: BaseException) -> InvalidValue:
    if isinstance(error, InvalidValue):
        return error
    return InvalidValue(f"cannot store this span: {type(error).__name__}: {error}")
