"""The store's tables as raw rows, the same columns in every backend: what `tether store migrate` copies.

Copying rows, not going through the `Store` interface, keeps everything as it was: ids, statuses,
attempts, times, span and reward sequence numbers, every version of every resource, tasks' datasets.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from tether.store.base import StoreError
from tether.store.sql.rows import BATCH, TABLES, Rows, names, strip_seq
from tether.store.sqlite import SYNTAX, SQLiteStore


class Tables(Protocol):
    """Raw access to one store's tables."""

    where: str

    def count(self, table: str) -> int: ...

    def read(self, table: str, batch: int = BATCH) -> Iterator[Rows]:
        """The table's rows in TABLES' column order, oldest first, `batch` at a time."""
        ...

    def write(self, table: str, rows: Rows, keep_seq: bool) -> int:
        """Insert rows (skipping any whose key exists) in the open copy transaction; returns how many."""
        ...

    def commit(self) -> None:
        """End the copy transaction (everything or nothing) and fix up the sequence counters."""
        ...

    def close(self) -> None: ...


class SQLiteTables:
    ORDER = {
        "tasks": "id",
        "rollouts": "created_at, rowid",
        "attempts": "rollout_id, number",
        "spans": "seq",
        "rewards": "seq",
        "resources": "name, version",
    }

    def __init__(self, path: Path) -> None:
        self.where = str(path.resolve())
        SQLiteStore(path).close()  # creates the file, or brings an older one's schema up to date
        self._db = sqlite3.connect(path, isolation_level=None)
        self._in_copy = False

    def count(self, table: str) -> int:
        (count,) = self._db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()  # noqa: S608 - fixed names
        return int(count)

    def read(self, table: str, batch: int = BATCH) -> Iterator[Rows]:
        cursor = self._db.execute(
            f"SELECT {', '.join(TABLES[table])} FROM {table} ORDER BY {self.ORDER[table]}"  # noqa: S608
        )
        while rows := cursor.fetchmany(batch):
            yield rows

    def write(self, table: str, rows: Rows, keep_seq: bool) -> int:
        if not self._in_copy:
            self._db.execute("BEGIN IMMEDIATE")
            self._in_copy = True
        before = self._db.total_changes
        insert = SYNTAX.insert(table, names(table, keep_seq), ignore=True)
        self._db.executemany(insert, strip_seq(table, rows, keep_seq))
        return self._db.total_changes - before

    def commit(self) -> None:
        if self._in_copy:
            self._db.execute("COMMIT")
            self._in_copy = False

    def close(self) -> None:
        if self._in_copy:
            self._db.execute("ROLLBACK")
        self._db.close()


def open_tables(url: str, project_dir: Path) -> Tables:
    """The tables of the store `url` names: a SQLite file or a PostgreSQL database."""
    from tether.store.backends import scheme_of, sqlite_path

    scheme = scheme_of(url)
    if scheme == "sqlite":
        return SQLiteTables(sqlite_path(url, project_dir))
    if scheme in ("postgresql", "postgres"):
        from tether.store.postgres.tables import PostgresTables

        return PostgresTables(url)
    raise StoreError(
        f"cannot copy the store {url}: name a SQLite file (sqlite:///PATH) or a PostgreSQL database "
        "(postgresql://...); for a remote `tether serve`, copy the database it serves"
    )
