"""The PostgreSQL dialect of the SQL store.

- Claims take the oldest queued rollout with `FOR UPDATE SKIP LOCKED`: concurrent claimers, in any
  process, each lock a different row instead of queueing behind one another.
- Each rollout-changing transaction notifies the rollouts channel on commit (a trigger, see schema.py).
  One listener thread per store turns that into the rollout epoch and wakes `wait_for` callers.
- Bulk writes are one statement over one array per column (`unnest`): one round trip, atomic on its own.
  Span writes are group-committed too (group_commit.py): callers that write at once share one statement,
  and each returns only once its spans are committed.
- Statements run on a connection pool in autocommit mode; writes open an explicit transaction.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import psycopg
from psycopg import errors
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from tether.store.base import InvalidValue, StoreError
from tether.store.postgres.changes import Listener
from tether.store.postgres.group_commit import GroupCommit
from tether.store.postgres.schema import migrate
from tether.store.records import RolloutPage, RolloutQuery
from tether.store.sql.changes import Changes
from tether.store.sql.dialect import Syntax, Tx
from tether.store.sql.rows import REWARD_COLUMNS, ROLLOUT_COLUMNS, Params, Row, names

CONNECT_TIMEOUT_S = 10
POOL_TIMEOUT_S = 30.0
PASSWORD_PARAMS = frozenset({"password", "sslpassword"})  # libpq's URL parameters that hold one
# What a statement raises when the value, not the database, is at fault (bad text, out of range, too big).
CONTENT_ERRORS = (errors.DataError, errors.ProgramLimitExceeded)

SYNTAX = Syntax(
    placeholder="%s",
    order_key="seq",
    row_lock=" FOR UPDATE",
    claim_lock=" FOR UPDATE SKIP LOCKED",
    bytewise=' COLLATE "C"',
    returning=True,
    name_lock="SELECT pg_advisory_xact_lock(hashtextextended(?, 0))",
    ignore=("INSERT INTO", " ON CONFLICT DO NOTHING"),
)


def _arrays(columns: str, types: str) -> str:
    """The rows given as one array per column, in their order."""
    arrays = ", ".join(f"%s::{kind}[]" for kind in types.split())
    return f"unnest({arrays}) WITH ORDINALITY AS given ({columns}, position)"


SPAN_COLUMNS = names("spans", keep_seq=False)
INSERT_SPANS = (
    f"INSERT INTO spans ({SPAN_COLUMNS}) SELECT {SPAN_COLUMNS} FROM "
    + _arrays(SPAN_COLUMNS, "text bigint text text text text text float8 float8 text text text text text")
    + " ORDER BY position ON CONFLICT (rollout_id, trace_id, span_id) DO NOTHING"
)
# Every reward, or none when one names an unknown rollout.
REWARD_TYPES = "text bigint text float8 text text float8 boolean"
INSERT_REWARDS = (
    f"WITH given AS (SELECT * FROM {_arrays(REWARD_COLUMNS, REWARD_TYPES)}) "
    f"INSERT INTO rewards ({REWARD_COLUMNS}) SELECT {REWARD_COLUMNS} FROM given "
    "WHERE NOT EXISTS (SELECT 1 FROM given g WHERE NOT EXISTS "
    "(SELECT 1 FROM rollouts r WHERE r.id = g.rollout_id)) ORDER BY position"
)
ROLLOUT_TYPES = (
    "text text text text text text bigint bigint float8 float8 float8 text text text text text bigint bigint"
)
ENQUEUE = (
    "WITH new_tasks AS (INSERT INTO tasks (id, dataset, input) "
    "SELECT * FROM unnest(%s::text[], %s::text[], %s::text[]) ON CONFLICT (id) DO NOTHING) "
    f"INSERT INTO rollouts ({ROLLOUT_COLUMNS}) SELECT {ROLLOUT_COLUMNS} FROM "
    + _arrays(ROLLOUT_COLUMNS, ROLLOUT_TYPES)
    + " ORDER BY position"
)


def redacted(url: str) -> str:
    """The URL without its password (in its user info, or as libpq's `password` or `sslpassword`
    parameter), for messages."""
    parts = urlsplit(url)
    head, mark, rest = url.partition("?")
    if parts.password is not None:
        host = parts.netloc.rsplit("@", 1)[1]
        head = head.replace(parts.netloc, f"{parts.username or ''}:***@{host}", 1)
    query = parse_qsl(parts.query, keep_blank_values=True)
    masked = [(name, "***" if _holds_password(name) else value) for name, value in query]
    if masked != query:
        rest = urlencode(masked, safe="/:*") + (f"#{parts.fragment}" if parts.fragment else "")
    return head + mark + rest


def _holds_password(name: str) -> bool:
    return name.strip().lower() in PASSWORD_PARAMS


def _by_column(rows: Sequence[Params]) -> list[list[Any]]:
    return [list(column) for column in zip(*rows, strict=True)]


def _reason(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class PostgresDialect:
    syntax = SYNTAX
    recheck_s: float | None = None  # the listener hears every change

    def __init__(self, url: str, pool_size: int) -> None:
        self.where = redacted(url)
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
                migrate(conn, self.where)
        except psycopg.Error as exc:
            raise StoreError(f"cannot open the PostgreSQL store {self.where}: {_reason(exc)}") from None
        self._pool: ConnectionPool[psycopg.Connection[Row]] = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True, "row_factory": dict_row, "connect_timeout": CONNECT_TIMEOUT_S},
            timeout=POOL_TIMEOUT_S,
            name="tether-store",
            open=True,
        )
        self.changes = Changes()
        self._listener = Listener(url, self.changes)
        try:
            self._listener.wait_until_listening(CONNECT_TIMEOUT_S)
        except (psycopg.Error, TimeoutError) as exc:
            self._pool.close()
            raise StoreError(f"cannot listen on the PostgreSQL store {self.where}: {exc}") from None
        self.spans: GroupCommit[Params] = GroupCommit(self._insert_spans)
        self._closed = False

    @contextmanager
    def _errors(self, doing: str, value: str = "keep") -> Iterator[None]:
        try:
            yield
        except CONTENT_ERRORS as exc:
            raise InvalidValue(f"the PostgreSQL store cannot {value} this value: {_reason(exc)}") from None
        except (psycopg.Error, PoolTimeout, PoolClosed) as exc:
            raise StoreError(f"cannot {doing} the PostgreSQL store {self.where}: {_reason(exc)}") from None

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        with (
            self._errors("write to"),
            self._pool.connection() as conn,
            conn.transaction(),
            conn.cursor() as cur,
        ):
            yield Tx(cur.execute, cur.executemany, SYNTAX)

    def read(self, sql: str, params: Params = ()) -> list[Row]:
        with self._errors("read", value="take"), self._pool.connection() as conn:
            return conn.execute(SYNTAX.sql(sql), params).fetchall()

    def _statement(self, query: str, params: Params) -> int:
        """One write statement, committed on its own (autocommit); returns how many rows it wrote."""
        with self._errors("write to"), self._pool.connection() as conn:
            return conn.execute(query, params).rowcount

    def any_of(self, column: str, values: Sequence[str]) -> tuple[str, Any]:
        return f"{column} = ANY(?)", list(values)

    def copy_rollouts(self, tasks: Sequence[Params], rollouts: Sequence[Params]) -> None:
        self._statement(ENQUEUE, _by_column(tasks) + _by_column(rollouts))

    def copy_spans(self, spans: Sequence[Params]) -> None:
        self.spans.submit(spans)

    def _insert_spans(self, spans: Sequence[Params]) -> None:
        self._statement(INSERT_SPANS, _by_column(spans))

    def copy_rewards(self, rewards: Sequence[Params]) -> int:
        return self._statement(INSERT_REWARDS, _by_column(rewards))

    def query_rollouts(self, query: RolloutQuery) -> RolloutPage | None:
        return None  # the generic scan; a single SQL statement would serve big stores better

    def epoch(self) -> Hashable:
        # Moved by this process's own commits at once, and by every other process's on their NOTIFY.
        return self.changes.epoch

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            with self._pool.connection() as conn:
                self._listener.close(conn)
        except (psycopg.Error, PoolTimeout, PoolClosed):
            self._listener.close(None)
        self._pool.close()
