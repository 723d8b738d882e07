"""Rollout changes as they commit, from any process: LISTEN on the rollouts channel, on one thread.

The listener's connection does nothing but wait for notifications, so a change made anywhere wakes the
waiters at once (no polling), and counts as a new rollout epoch here.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import psycopg
from psycopg import sql

from tether.store.postgres.schema import ROLLOUTS_CHANNEL
from tether.store.sql.changes import Changes

# How long the listener waits before checking its connection; after a lost connection, before retrying.
WAKE_S = 5.0
RETRY_S = 0.5


class Listener:
    """Reports every rollout change notified on the rollouts channel to `changes`."""

    def __init__(self, conninfo: str, changes: Changes) -> None:
        self._conninfo = conninfo
        self._changes = changes
        self._closing = threading.Event()
        self.stop_channel = f"tether_stop_{uuid.uuid4().hex}"
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._listen, name="tether-pg-listener", daemon=True)
        self._thread.start()

    def wait_until_listening(self, timeout: float) -> None:
        """Return once LISTEN is in effect (changes committed afterwards are seen); raise if it failed."""
        if not self._ready.wait(timeout) and self._error is None:
            raise TimeoutError("the PostgreSQL listener did not start")
        if self._error is not None:
            raise self._error

    def close(self, stop: psycopg.Connection[Any] | None) -> None:
        """Stop the listener; `stop`, a connection, wakes it at once with a NOTIFY on its own channel."""
        self._closing.set()
        if stop is not None:
            try:
                stop.execute(sql.SQL("NOTIFY {}").format(sql.Identifier(self.stop_channel)))
            except psycopg.Error:
                pass
        self._thread.join(WAKE_S + 1)

    def _listen(self) -> None:
        first = True
        while not self._closing.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True) as conn:
                    for channel in (ROLLOUTS_CHANNEL, self.stop_channel):
                        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                    if not first:
                        self._changes.changed(None)  # changes made while it was not listening went unseen
                    first = False
                    self._ready.set()
                    self._relay(conn)
            except psycopg.Error as exc:
                if first:
                    self._error = exc
                    self._ready.set()
                    return
                self._closing.wait(RETRY_S)

    def _relay(self, conn: psycopg.Connection) -> None:
        while not self._closing.is_set():
            for note in conn.notifies(timeout=WAKE_S):
                if note.channel == self.stop_channel or self._closing.is_set():
                    return
                self._changes.changed([note.payload])
