"""The PostgreSQL store's tables as raw rows (see tether/store/tables.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import sql

from tether.store.postgres.store import PostgresStore, redacted
from tether.store.sql.rows import BATCH, SEQUENCED, TABLES, Rows, columns, strip_seq

ORDER = {
    "tasks": 'id COLLATE "C"',  # byte order, as SQLite's
    "rollouts": "created_at, seq",
    "attempts": 'rollout_id COLLATE "C", number',
    "spans": "seq",
    "rewards": "seq",
    "resources": 'name COLLATE "C", version',
}


class PostgresTables:
    def __init__(self, url: str) -> None:
        self.where = redacted(url)
        PostgresStore(url).close()  # creates the schema, or migrates an older one
        self._db = psycopg.connect(url)  # one transaction: a copy lands whole or not at all

    def count(self, table: str) -> int:
        row = self._db.execute(sql.SQL("SELECT COUNT(*) FROM {}").format(sql.Identifier(table))).fetchone()
        return int(row[0]) if row else 0

    def read(self, table: str, batch: int = BATCH) -> Iterator[Rows]:
        query = sql.SQL("SELECT {} FROM {} ORDER BY {}").format(
            sql.SQL(", ").join(map(sql.Identifier, TABLES[table])),
            sql.Identifier(table),
            sql.SQL(ORDER[table]),
        )
        with self._db.cursor(name=f"read_{table}") as cursor:  # server-side: not all in memory
            cursor.execute(query)
            while rows := cursor.fetchmany(batch):
                yield [self._canonical(table, row) for row in rows]

    @staticmethod
    def _canonical(table: str, row: tuple[Any, ...]) -> tuple[Any, ...]:
        if table == "rewards":  # a flag is a boolean here, 0/1 in SQLite
            return (*row[:-1], int(row[-1]))
        return tuple(row)

    def write(self, table: str, rows: Rows, keep_seq: bool) -> int:
        names = columns(table, keep_seq)
        values = strip_seq(table, rows, keep_seq)
        if table == "rewards":
            values = [(*row[:-1], bool(row[-1])) for row in values]
        query = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT DO NOTHING").format(
            sql.Identifier(table),
            sql.SQL(", ").join(map(sql.Identifier, names)),
            sql.SQL(", ").join(sql.Placeholder() * len(names)),
        )
        with self._db.cursor() as cursor:
            cursor.executemany(query, values)
            return max(cursor.rowcount, 0)

    def commit(self) -> None:
        for table in SEQUENCED:  # rows copied with their numbers: the counter continues after them
            self._db.execute(
                sql.SQL(
                    "SELECT setval(pg_get_serial_sequence({table}, 'seq'), COALESCE(MAX(seq), 0) + 1, false) "
                    "FROM {ident}"
                ).format(table=sql.Literal(table), ident=sql.Identifier(table))
            )
        self._db.commit()

    def close(self) -> None:
        self._db.rollback()
        self._db.close()
