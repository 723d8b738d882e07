"""The SQLite store: the embedded default (one WAL file per project) and the in-memory store for tests.

All statements of one store object go through one connection guarded by a lock. Writes run in
`BEGIN IMMEDIATE` transactions, which take SQLite's write lock up front, so two processes sharing a
file can never claim the same rollout.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from tether.filemodes import PRIVATE_DIR, PRIVATE_FILE, make_private
from tether.store import sqlite_query, sqlite_schema
from tether.store.base import StoreError
from tether.store.records import RolloutPage, RolloutQuery
from tether.store.sql.changes import Changes
from tether.store.sql.dialect import Syntax, Tx, insert_rollouts
from tether.store.sql.rows import REWARD_COLUMNS, Params, Row, dumps, names
from tether.store.sql.store import SQLStore

SYNTAX = Syntax(placeholder="?", order_key="rowid")
INSERT_SPANS = SYNTAX.insert("spans", names("spans", keep_seq=False), ignore=True)
INSERT_REWARDS = SYNTAX.insert("rewards", REWARD_COLUMNS)
# A waiter re-reads the database this often, to see changes made by other processes.
CROSS_PROCESS_RECHECK_S = 0.25


def _create_private(path: Path) -> None:
    """The database holds every prompt and response: create it readable by its owner only (SQLite's
    WAL and shared-memory files take its mode), and tighten an existing one."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, PRIVATE_FILE))
    except OSError:
        return  # not creatable here (read-only place): opening it says why
    for suffix in ("", "-wal", "-shm"):
        with suppress(OSError):
            make_private(path.with_name(path.name + suffix))


class SQLiteDialect:
    syntax = SYNTAX
    recheck_s: float | None = CROSS_PROCESS_RECHECK_S

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            if path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
                _create_private(Path(path))
            self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open store database {path}: {exc}") from exc
        self.db.row_factory = sqlite3.Row
        self._lock = threading.RLock()
        self.changes = Changes()
        with self._lock:
            try:
                if path != ":memory:":
                    self.db.execute("PRAGMA journal_mode=WAL")
                    # In WAL mode NORMAL survives a killed process; only an OS crash can lose recent commits.
                    self.db.execute("PRAGMA synchronous=NORMAL")
                sqlite_schema.create(self.db)
            except sqlite3.Error as exc:
                self.db.close()
                raise StoreError(f"cannot open store database {path}: {exc}") from exc

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        with self._lock:
            try:
                self.db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._failed("write to", exc) from exc
            try:
                yield Tx(self.db.execute, self.db.executemany, SYNTAX)
                self.db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                raise self._failed("write to", exc) from exc
            except BaseException:
                self._rollback()
                raise

    def _rollback(self) -> None:
        # SQLite rolls some failed transactions back by itself; a second ROLLBACK would hide the real error.
        with suppress(sqlite3.Error):
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")

    def _failed(self, doing: str, exc: sqlite3.Error) -> StoreError:
        return StoreError(f"cannot {doing} store database {self.path}: {exc}")

    def read(self, sql: str, params: Params = ()) -> list[Row]:
        with self._lock:
            try:
                return self.db.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise self._failed("read", exc) from exc

    def any_of(self, column: str, values: Sequence[str]) -> tuple[str, Any]:
        return f"{column} IN (SELECT value FROM json_each(?))", dumps(list(values))

    def copy_rollouts(self, tasks: Sequence[Params], rollouts: Sequence[Params]) -> None:
        with self.transaction() as tx:
            insert_rollouts(tx, tasks, rollouts)

    def copy_spans(self, spans: Sequence[Params]) -> None:
        with self.transaction() as tx:
            tx.many(INSERT_SPANS, spans)

    def copy_rewards(self, rewards: Sequence[Params]) -> int:
        with self.transaction() as tx:
            ids = {reward[0] for reward in rewards}
            condition, param = self.any_of("id", sorted(ids))
            known = tx.one(f"SELECT COUNT(*) AS n FROM rollouts WHERE {condition}", (param,))
            if known is None or known["n"] != len(ids):
                return 0
            tx.many(INSERT_REWARDS, rewards)
            return len(rewards)

    def query_rollouts(self, query: RolloutQuery) -> RolloutPage | None:
        with self._lock:  # the page and its count, with no write of this store between them
            found = self.read(*sqlite_query.page_sql(query))
            total = self.read(*sqlite_query.count_sql(query))[0]["n"]
        return sqlite_query.page(found, total, query)

    def epoch(self) -> Hashable:
        if self.path == ":memory:":
            return self.changes.epoch
        # Other processes sharing the file change rollouts unseen here: the second part makes every
        # cached rollout at most CROSS_PROCESS_RECHECK_S old.
        return (self.changes.epoch, int(time.monotonic() / CROSS_PROCESS_RECHECK_S))

    def close(self) -> None:
        with self._lock:
            self.db.close()


class SQLiteStore(SQLStore):
    """A durable store in one SQLite file, or an in-memory one with `path=":memory:"`."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        dialect = SQLiteDialect(str(path))
        super().__init__(dialect)
        self.path = dialect.path
        self._db = dialect.db

    @classmethod
    def in_memory(cls) -> SQLiteStore:
        return cls(":memory:")
