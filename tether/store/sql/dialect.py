"""What differs between the SQL databases a `SQLStore` runs on: a `Dialect` for each.

The store writes its statements once, with `?` placeholders; `Syntax` holds the few pieces of SQL text
that differ, the dialect the behaviour: connections and errors, claim locking, bulk writes (copies of
many rows in one round trip where the database allows), change wakeups and the rollout query.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from tether.store.records import RolloutPage, RolloutQuery
from tether.store.sql.changes import Changes
from tether.store.sql.rows import ROLLOUT_COLUMNS, Params, Row, names


@dataclass(frozen=True)
class Syntax:
    placeholder: str  # the driver's, for the store's `?`
    order_key: str  # breaks ties of `created_at` in insertion order
    row_lock: str = ""  # ends a SELECT of a rollout the transaction goes on to change
    claim_lock: str = ""  # ends the SELECT of the queue's head
    bytewise: str = ""  # a COLLATE clause for byte order
    returning: bool = False  # UPDATE ... RETURNING (SQLite has it only since 3.35: not relied on there)
    name_lock: str | None = None  # a statement that serializes writers of one resource name, if needed
    ignore: tuple[str, str] = ("INSERT OR IGNORE INTO", "")  # an INSERT skipping rows whose key exists

    def sql(self, text: str) -> str:
        return text if self.placeholder == "?" else _placeholders(text, self.placeholder)

    def insert(self, table: str, columns: str, *, ignore: bool = False) -> str:
        verb, tail = self.ignore if ignore else ("INSERT INTO", "")
        marks = ", ".join("?" * len(columns.split(", ")))
        return f"{verb} {table} ({columns}) VALUES ({marks}){tail}"


@functools.cache
def _placeholders(text: str, placeholder: str) -> str:
    return text.replace("?", placeholder)


class Cursor(Protocol):
    """What a statement returns: sqlite3 and psycopg cursors alike."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


@dataclass
class Tx:
    """One open write transaction. `changed` collects the rollouts it changed, for the wakeups."""

    execute: Callable[[str, Params], Cursor]
    executemany: Callable[[str, Sequence[Params]], object]
    syntax: Syntax
    changed: list[str] = field(default_factory=list)
    any_changed: bool = False  # every rollout may have changed (one list would be too long)

    def run(self, sql: str, params: Params = ()) -> int:
        """Run a statement; returns how many rows it changed."""
        return self.execute(self.syntax.sql(sql), params).rowcount

    def rows(self, sql: str, params: Params = ()) -> list[Row]:
        return self.execute(self.syntax.sql(sql), params).fetchall()

    def one(self, sql: str, params: Params = ()) -> Row | None:
        row: Row | None = self.execute(self.syntax.sql(sql), params).fetchone()
        return row

    def many(self, sql: str, rows: Sequence[Params]) -> None:
        if rows:
            self.executemany(self.syntax.sql(sql), rows)


def insert_rollouts(tx: Tx, tasks: Sequence[Params], rollouts: Sequence[Params]) -> None:
    """New tasks (known ones are skipped) and new rollouts (a (run, key) another process took first is)."""
    tx.many(tx.syntax.insert("tasks", names("tasks"), ignore=True), tasks)
    tx.many(tx.syntax.insert("rollouts", ROLLOUT_COLUMNS, ignore=True), rollouts)


class Dialect(Protocol):
    syntax: Syntax
    changes: Changes  # the dialect reports commits of other processes here, when it hears them
    recheck_s: float | None  # how often a waiter reads again (changes it does not hear of)

    def transaction(self) -> AbstractContextManager[Tx]:
        """Everything or nothing; errors come out as StoreError (InvalidValue: the value's fault)."""
        ...

    def read(self, sql: str, params: Params = ()) -> list[Row]: ...

    def any_of(self, column: str, values: Sequence[str]) -> tuple[str, Any]:
        """A condition `column` is one of `values`, and its one parameter."""
        ...

    def copy_rollouts(self, tasks: Sequence[Params], rollouts: Sequence[Params]) -> None:
        """Insert new tasks (skipping known ones) and new rollouts, committed."""
        ...

    def copy_spans(self, spans: Sequence[Params]) -> None:
        """Insert spans (skipping known ones), committed when it returns."""
        ...

    def copy_rewards(self, rewards: Sequence[Params]) -> int:
        """Insert every reward, or none when one names an unknown rollout; returns how many."""
        ...

    def query_rollouts(self, query: RolloutQuery) -> RolloutPage | None:
        """The dialect's own answer to `Store.query_rollouts`; None: scan (`rollout_query`)."""
        ...

    def epoch(self) -> Hashable: ...

    def close(self) -> None: ...
