"""The PostgreSQL store: the `Store` interface over a database server that workers on many hosts share.

- Claims take the oldest queued rollout with `FOR UPDATE SKIP LOCKED`: concurrent claimers, in any
  process, each lock a different row instead of queueing behind one another.
- Each rollout-changing transaction notifies the rollouts channel on commit (a trigger, see schema.py).
  One listener thread per store turns that into the rollout epoch and wakes `wait_for` callers.
- Span writes are group-committed (group_commit.py): callers that write at once share one transaction,
  and each returns only once its spans are committed.
- Statements run on a connection pool in autocommit mode; writes open an explicit transaction.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import errors
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from tether.contracts import Meta
from tether.store import lifecycle
from tether.store.base import InvalidTransition, InvalidValue, NotFound, StoreError
from tether.store.codec import span_conditions, span_of, span_values
from tether.store.models import (
    Attempt,
    Claim,
    Resource,
    Reward,
    Rollout,
    RolloutPage,
    RolloutQuery,
    RolloutRequest,
    RolloutStatus,
    Span,
    Task,
    new_id,
    now,
)
from tether.store.postgres import rows
from tether.store.postgres.changes import RolloutChanges
from tether.store.postgres.group_commit import GroupCommit
from tether.store.postgres.rows import (
    ATTEMPT_COLUMNS,
    RESOURCE_COLUMNS,
    REWARD_COLUMNS,
    ROLLOUT_COLUMNS,
    SPAN_COLUMNS,
    Row,
    placeholders,
)
from tether.store.postgres.schema import migrate

POOL_SIZE = 16
CONNECT_TIMEOUT_S = 10
POOL_TIMEOUT_S = 30.0
# What a statement raises when the value, not the database, is at fault (bad text, out of range, too big).
CONTENT_ERRORS = (errors.DataError, errors.ProgramLimitExceeded)

# One statement for any number of spans (one array per column): one round trip, atomic on its own.
SPAN_TYPES = "text bigint text text text text text float8 float8 text text text text text".split()
INSERT_SPANS = (
    f"INSERT INTO spans ({SPAN_COLUMNS}) SELECT {SPAN_COLUMNS} FROM unnest("
    + ", ".join(f"%s::{kind}[]" for kind in SPAN_TYPES)
    + f") WITH ORDINALITY AS given ({SPAN_COLUMNS}, position) ORDER BY position "
    "ON CONFLICT (rollout_id, trace_id, span_id) DO NOTHING"
)
# Every reward, or none when one names an unknown rollout: one statement, one round trip.
REWARD_TYPES = "text bigint text float8 text text float8 boolean".split()
INSERT_REWARDS = (
    "WITH given AS (SELECT * FROM unnest("
    + ", ".join(f"%s::{kind}[]" for kind in REWARD_TYPES)
    + f") WITH ORDINALITY AS given ({REWARD_COLUMNS}, position)) "
    f"INSERT INTO rewards ({REWARD_COLUMNS}) SELECT {REWARD_COLUMNS} FROM given "
    "WHERE NOT EXISTS (SELECT 1 FROM given g WHERE NOT EXISTS "
    "(SELECT 1 FROM rollouts r WHERE r.id = g.rollout_id)) ORDER BY position"
)
INSERT_RESOURCE = f"INSERT INTO resources ({RESOURCE_COLUMNS}) VALUES ({placeholders(RESOURCE_COLUMNS)})"
INSERT_ROLLOUT = (
    f"INSERT INTO rollouts ({ROLLOUT_COLUMNS}) VALUES ({placeholders(ROLLOUT_COLUMNS)}) "
    "ON CONFLICT DO NOTHING"
)
ROLLOUT_TYPES = (
    "text text text text text text bigint bigint float8 float8 float8 text text text text text bigint bigint"
).split()
ENQUEUE = (
    "WITH new_tasks AS (INSERT INTO tasks (id, dataset, input) "
    "SELECT * FROM unnest(%s::text[], %s::text[], %s::text[]) ON CONFLICT (id) DO NOTHING) "
    f"INSERT INTO rollouts ({ROLLOUT_COLUMNS}) SELECT {ROLLOUT_COLUMNS} FROM unnest("
    + ", ".join(f"%s::{kind}[]" for kind in ROLLOUT_TYPES)
    + f") WITH ORDINALITY AS given ({ROLLOUT_COLUMNS}, position) ORDER BY position"
)
QUEUE_HEAD = (
    f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE status = 'queued' {{run}}"
    "ORDER BY created_at, seq LIMIT 1 FOR UPDATE SKIP LOCKED"
)


def redacted(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


@dataclass
class _Tx:
    cur: psycopg.Cursor[Row]
    changed: list[str] = field(default_factory=list)  # rollouts this transaction changed


class PostgresStore:
    """A store in a PostgreSQL database named by a `postgresql://user:password@host:port/db` URL."""

    def __init__(self, url: str, *, pool_size: int = POOL_SIZE) -> None:
        self.url = url
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
        self._changes = RolloutChanges(url)
        try:
            self._changes.wait_until_listening(CONNECT_TIMEOUT_S)
        except (psycopg.Error, TimeoutError) as exc:
            self._pool.close()
            raise StoreError(f"cannot listen on the PostgreSQL store {self.where}: {exc}") from None
        self._spans: GroupCommit[tuple[Any, ...]] = GroupCommit(self._insert_spans)
        self._closed = False

    def rollouts_epoch(self) -> Hashable:
        # Moved by this object's own commits at once, and by every other process's on their NOTIFY.
        return self._changes.epoch

    @property
    def span_commits(self) -> int:
        """Transactions that wrote spans (fewer than `add_spans` calls when callers write at once)."""
        return self._spans.commits

    # -- plumbing -------------------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[_Tx]:
        try:
            with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
                tx = _Tx(cur)
                yield tx
        except CONTENT_ERRORS as exc:
            raise InvalidValue(f"the PostgreSQL store cannot keep this value: {_reason(exc)}") from None
        except (psycopg.Error, PoolTimeout, PoolClosed) as exc:
            raise StoreError(f"cannot write to the PostgreSQL store {self.where}: {_reason(exc)}") from None
        if tx.changed:
            self._changes.changed(tx.changed)

    def _read(self, query: str, params: Sequence[Any] = ()) -> list[Row]:
        try:
            with self._pool.connection() as conn:
                return conn.execute(query.encode(), params).fetchall()
        except CONTENT_ERRORS as exc:
            raise InvalidValue(f"the PostgreSQL store cannot take this value: {_reason(exc)}") from None
        except (psycopg.Error, PoolTimeout, PoolClosed) as exc:
            raise StoreError(f"cannot read the PostgreSQL store {self.where}: {_reason(exc)}") from None

    @staticmethod
    def _one(tx: _Tx, query: str, params: Sequence[Any] = ()) -> Row | None:
        return tx.cur.execute(query.encode(), params).fetchone()

    def _locked_rollout(self, tx: _Tx, rollout_id: str) -> Rollout:
        row = self._one(tx, f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE id = %s FOR UPDATE", (rollout_id,))
        if row is None:
            raise NotFound("rollout", rollout_id)
        return rows.rollout(row)

    # -- rollouts -------------------------------------------------------------------------------------

    def enqueue(self, requests: Sequence[RolloutRequest]) -> list[Rollout]:
        requests = list(requests)
        if not requests:
            return []
        if not any(r.run is not None and r.key is not None for r in requests):
            return self._enqueue_unkeyed(requests)
        with self._write() as tx:
            existing = self._existing_keys(tx, requests)
            new = [r for r in requests if (r.run, r.key) not in existing]
            created = self._insert_rollouts(tx, new)
            lost = self._lost_races(tx, created)
            if lost:  # another process enqueued the same (run, key) meanwhile: theirs is the rollout
                existing.update(self._existing_keys(tx, lost))
                created = [r for r in created if (r.run, r.key) not in existing]
            fresh = iter(created)
            return [existing.get((r.run, r.key)) or next(fresh) for r in requests]

    def _existing_keys(self, tx: _Tx, requests: Sequence[RolloutRequest | Rollout]) -> dict[Any, Rollout]:
        found: dict[Any, Rollout] = {}
        by_run: dict[str, list[str]] = {}
        for r in requests:
            if r.run is not None and r.key is not None:
                by_run.setdefault(r.run, []).append(r.key)
        for run, keys in by_run.items():
            tx.cur.execute(
                f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE run = %s AND key = ANY(%s)".encode(),
                (run, keys),
            )
            for row in tx.cur.fetchall():
                found[(run, row["key"])] = rows.rollout(row)
        return found

    def _enqueue_unkeyed(self, requests: list[RolloutRequest]) -> list[Rollout]:
        """Nothing to look up first: tasks and rollouts go in with one statement, one round trip."""
        rollouts = _new_rollouts(requests)
        tasks = [(r.task.id, r.task.dataset, rows.dumps(r.task.input)) for r in requests]
        columns = [list(column) for column in zip(*tasks, strict=True)]
        columns += [list(column) for column in zip(*map(rows.rollout_params, rollouts), strict=True)]
        self._statement(ENQUEUE, columns)
        return rollouts

    def _insert_rollouts(self, tx: _Tx, requests: list[RolloutRequest]) -> list[Rollout]:
        rollouts = _new_rollouts(requests)
        if not rollouts:
            return []
        tx.cur.executemany(
            b"INSERT INTO tasks (id, dataset, input) VALUES (%s, %s, %s) ON CONFLICT (id) DO NOTHING",
            [(r.task.id, r.task.dataset, rows.dumps(r.task.input)) for r in requests],
        )
        tx.cur.executemany(
            INSERT_ROLLOUT.encode(),
            [rows.rollout_params(r) for r in rollouts],
        )
        return rollouts

    def _lost_races(self, tx: _Tx, created: list[Rollout]) -> list[Rollout]:
        keyed = [r for r in created if r.run is not None and r.key is not None]
        if not keyed:
            return []
        tx.cur.execute(b"SELECT id FROM rollouts WHERE id = ANY(%s)", ([r.id for r in keyed],))
        inserted = {row["id"] for row in tx.cur.fetchall()}
        return [r for r in keyed if r.id not in inserted]

    def claim(self, worker_id: str, run: str | None = None) -> Claim | None:
        with self._write() as tx:
            if run is None:
                row = self._one(tx, QUEUE_HEAD.format(run=""))
            else:
                row = self._one(tx, QUEUE_HEAD.format(run="AND run = %s "), (run,))
            if row is None:
                return None
            return self._open_attempt(tx, rows.rollout(row), worker_id)

    def _open_attempt(self, tx: _Tx, rollout: Rollout, worker_id: str) -> Claim:
        started = now()
        number = lifecycle.next_attempt(rollout)
        tx.cur.execute(
            b"UPDATE rollouts SET status = 'running', attempt_count = %s, "
            b"started_at = COALESCE(started_at, %s) WHERE id = %s",
            (number, started, rollout.id),
        )
        tx.cur.execute(
            b"INSERT INTO attempts (rollout_id, number, worker_id, status, started_at, heartbeat_at) "
            b"VALUES (%s, %s, %s, 'running', %s, %s)",
            (rollout.id, number, worker_id, started, started),
        )
        tx.changed.append(rollout.id)
        rollout = rollout.model_copy(
            update={
                "status": RolloutStatus.running,
                "attempt_count": number,
                "started_at": rollout.started_at or started,
            }
        )
        attempt = Attempt(
            rollout_id=rollout.id,
            number=number,
            worker_id=worker_id,
            started_at=started,
            heartbeat_at=started,
        )
        return Claim(rollout=rollout, attempt=attempt)

    def start_session(
        self, input: dict[str, Any] | None = None, worker_id: str = "session", mode: str = "session"
    ) -> Claim:
        request = RolloutRequest(task=Task(input=input or {}), mode=mode, metadata={Meta.SESSION: True})
        with self._write() as tx:  # one transaction: no claim can take the session's rollout first
            rollout = self._insert_rollouts(tx, [request])[0]
            return self._open_attempt(tx, rollout, worker_id)

    def heartbeat(self, rollout_id: str, attempt: int) -> None:
        with self._write() as tx:
            beat = self._one(
                tx,
                "UPDATE attempts SET heartbeat_at = %s "
                "WHERE rollout_id = %s AND number = %s AND status = 'running' RETURNING number",
                (now(), rollout_id, attempt),
            )
            if beat is None:
                raise NotFound("running attempt", f"{rollout_id}#{attempt}")

    def update_status(
        self,
        rollout_id: str,
        status: RolloutStatus,
        *,
        output: str | None = None,
        error: str | None = None,
        attempt: int | None = None,
    ) -> Rollout:
        with self._write() as tx:
            rollout = self._locked_rollout(tx, rollout_id)
            closing = lifecycle.close_attempt(rollout, status, attempt)
            return self._apply(tx, rollout, closing, output, error)

    def abandon(self, rollout_id: str, attempt: int, reason: str) -> Rollout:
        with self._write() as tx:
            rollout = self._locked_rollout(tx, rollout_id)
            closing = lifecycle.abandon_attempt(rollout, attempt)
            return self._apply(tx, rollout, closing, None, reason)

    def _apply(
        self, tx: _Tx, rollout: Rollout, closing: lifecycle.Closing, output: str | None, error: str | None
    ) -> Rollout:
        ended = now()
        if closing.attempt:
            tx.cur.execute(
                b"UPDATE attempts SET status = %s, ended_at = %s, error = %s "
                b"WHERE rollout_id = %s AND number = %s AND status = 'running'",
                (closing.attempt_status.value, ended, error, rollout.id, closing.attempt),
            )
        if closing.requeued:
            row = self._one(
                tx,
                "UPDATE rollouts SET status = 'queued', error = %s, worker_losses = %s WHERE id = %s "
                f"RETURNING {ROLLOUT_COLUMNS}",
                (error, closing.worker_losses, rollout.id),
            )
        else:
            row = self._one(
                tx,
                "UPDATE rollouts SET status = %s, ended_at = %s, output = COALESCE(%s, output), error = %s, "
                f"worker_losses = %s WHERE id = %s RETURNING {ROLLOUT_COLUMNS}",
                (closing.rollout_status.value, ended, output, error, closing.worker_losses, rollout.id),
            )
        tx.changed.append(rollout.id)
        assert row is not None  # the row is locked: it cannot have gone
        return rows.rollout(row)

    def requeue_stale(self, heartbeat_timeout: float) -> list[str]:
        stale = self._read(
            "SELECT a.rollout_id, a.number FROM attempts a JOIN rollouts r ON r.id = a.rollout_id "
            "WHERE a.status = 'running' AND r.status = 'running' AND a.heartbeat_at < %s",
            (now() - heartbeat_timeout,),
        )
        moved = []
        for row in stale:
            try:
                self.abandon(row["rollout_id"], row["number"], "heartbeat lost")
                moved.append(row["rollout_id"])
            except InvalidTransition:  # a session, or closed meanwhile
                continue
        return moved

    def get_rollout(self, rollout_id: str) -> Rollout:
        found = self._read(f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE id = %s", (rollout_id,))
        if not found:
            raise NotFound("rollout", rollout_id)
        return rows.rollout(found[0])

    def _rollouts(self, rollout_ids: Sequence[str]) -> dict[str, Rollout]:
        found = self._read(f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE id = ANY(%s)", (list(rollout_ids),))
        by_id = {row["id"]: rows.rollout(row) for row in found}
        for rollout_id in rollout_ids:
            if rollout_id not in by_id:
                raise NotFound("rollout", rollout_id)
        return by_id

    def list_rollouts(
        self,
        *,
        status: RolloutStatus | None = None,
        since: float | None = None,
        until: float | None = None,
        run: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Rollout]:
        where: list[str] = []
        params: list[Any] = []
        for clause, value in (
            ("run = %s", run),
            ("status = %s", None if status is None else RolloutStatus(status).value),
            ("created_at >= %s", since),
            ("created_at < %s", until),
        ):
            if value is not None:
                where.append(clause)
                params.append(value)
        condition = f"WHERE {' AND '.join(where)}" if where else ""
        found = self._read(
            f"SELECT {ROLLOUT_COLUMNS} FROM rollouts {condition} ORDER BY created_at, seq LIMIT %s OFFSET %s",
            (*params, limit, offset),
        )
        return [rows.rollout(row) for row in found]

    def query_rollouts(self, query: RolloutQuery) -> RolloutPage:
        # The generic answer from the other methods; a single SQL statement would serve big stores better.
        from tether.store.rollout_query import query_rollouts_by_scanning

        return query_rollouts_by_scanning(self, query)

    def rename_run(self, run: str, new_name: str) -> int:
        with self._write() as tx:
            tx.cur.execute(b"UPDATE rollouts SET run = %s WHERE run = %s RETURNING id", (new_name, run))
            tx.changed.extend(row["id"] for row in tx.cur.fetchall())
            return len(tx.changed)

    def list_runs(self) -> list[str]:
        found = self._read(
            "SELECT run FROM rollouts WHERE run IS NOT NULL GROUP BY run "
            'ORDER BY MIN(created_at), run COLLATE "C"'
        )
        return [row["run"] for row in found]

    def list_attempts(self, rollout_id: str) -> list[Attempt]:
        found = self._read(
            f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE rollout_id = %s ORDER BY number", (rollout_id,)
        )
        if not found:
            self.get_rollout(rollout_id)  # an unknown rollout is NotFound, not an empty list
        return [rows.attempt(row) for row in found]

    def wait_for(self, rollout_ids: Sequence[str], timeout: float | None = None) -> list[Rollout]:
        ids = list(rollout_ids)
        deadline = None if timeout is None else time.monotonic() + timeout
        finished: dict[str, Rollout] = {}
        waiter = self._changes.register(ids)  # before reading: a change from now on wakes it
        try:
            while True:
                waiter.event.clear()
                pending = [rollout_id for rollout_id in dict.fromkeys(ids) if rollout_id not in finished]
                if pending:
                    fresh = self._rollouts(pending)
                    finished.update((i, r) for i, r in fresh.items() if r.status.finished)
                remaining = None if deadline is None else deadline - time.monotonic()
                if all(i in finished for i in ids) or (remaining is not None and remaining <= 0):
                    return [finished[i] for i in ids if i in finished]
                waiter.event.wait(remaining)
        finally:
            self._changes.unregister(waiter)

    # -- spans and rewards ----------------------------------------------------------------------------

    def add_spans(self, spans: Sequence[Span]) -> None:
        if spans:
            # Serialized here, by the caller: a value that cannot be JSON fails its own call only.
            self._spans.submit([span_values(span) for span in spans])

    def _insert_spans(self, params: Sequence[tuple[Any, ...]]) -> None:
        by_column = [list(column) for column in zip(*params, strict=True)]
        self._statement(INSERT_SPANS, by_column)

    def _statement(self, query: str, params: Sequence[Any]) -> None:
        """One write statement, committed on its own (autocommit)."""
        try:
            with self._pool.connection() as conn:
                conn.execute(query.encode(), params)
        except CONTENT_ERRORS as exc:
            raise InvalidValue(f"the PostgreSQL store cannot keep this value: {_reason(exc)}") from None
        except (psycopg.Error, PoolTimeout, PoolClosed) as exc:
            raise StoreError(f"cannot write to the PostgreSQL store {self.where}: {_reason(exc)}") from None

    def query_spans(
        self,
        *,
        rollout_id: str | None = None,
        attempt: int | None = None,
        name: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 1000,
    ) -> list[Span]:
        condition, params = span_conditions(
            "%s", rollout_id=rollout_id, attempt=attempt, name=name, since=since, until=until
        )
        found = self._read(
            f"SELECT seq, {SPAN_COLUMNS} FROM spans {condition} ORDER BY seq LIMIT %s", (*params, limit)
        )
        return [span_of(row) for row in found]

    def add_rewards(self, rewards: Sequence[Reward]) -> None:
        if not rewards:
            return
        by_column = [list(column) for column in zip(*map(rows.reward_params, rewards), strict=True)]
        try:
            with self._pool.connection() as conn:
                written = conn.execute(INSERT_REWARDS.encode(), by_column).rowcount
        except CONTENT_ERRORS as exc:
            raise InvalidValue(f"the PostgreSQL store cannot keep this value: {_reason(exc)}") from None
        except (psycopg.Error, PoolTimeout, PoolClosed) as exc:
            raise StoreError(f"cannot write to the PostgreSQL store {self.where}: {_reason(exc)}") from None
        if written != len(rewards):  # none written: a rollout is unknown (rollouts are never deleted)
            self._rollouts(sorted({reward.rollout_id for reward in rewards}))
            raise StoreError(f"the PostgreSQL store wrote {written} of {len(rewards)} rewards")

    def query_rewards(self, rollout_id: str) -> list[Reward]:
        found = self._read(
            f"SELECT {REWARD_COLUMNS} FROM rewards WHERE rollout_id = %s ORDER BY seq", (rollout_id,)
        )
        return [rows.reward(row) for row in found]

    # -- resources ------------------------------------------------------------------------------------

    def put_resource(self, name: str, kind: str, value: Any) -> Resource:
        created = now()
        text = rows.dumps(value)
        with self._write() as tx:
            # Writers of one name take turns, so each gets the next version number.
            tx.cur.execute(b"SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (name,))
            latest = self._one(
                tx, "SELECT COALESCE(MAX(version), 0) AS v FROM resources WHERE name = %s", (name,)
            )
            version = int(latest["v"]) + 1 if latest else 1
            tx.cur.execute(
                INSERT_RESOURCE.encode(),
                (name, version, kind, text, created),
            )
        return Resource(name=name, kind=kind, version=version, value=value, created_at=created)

    def get_resource(self, name: str, version: int | None = None) -> Resource:
        if version is None:
            found = self._read(
                f"SELECT {RESOURCE_COLUMNS} FROM resources WHERE name = %s ORDER BY version DESC LIMIT 1",
                (name,),
            )
        else:
            found = self._read(
                f"SELECT {RESOURCE_COLUMNS} FROM resources WHERE name = %s AND version = %s", (name, version)
            )
        if not found:
            raise NotFound("resource", name if version is None else f"{name}@{version}")
        return rows.resource(found[0])

    def list_resources(self) -> list[Resource]:
        found = self._read(
            f'SELECT DISTINCT ON (name COLLATE "C") {RESOURCE_COLUMNS} FROM resources '
            'ORDER BY name COLLATE "C", version DESC'
        )
        return [rows.resource(row) for row in found]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            with self._pool.connection() as conn:
                self._changes.close(conn)
        except (psycopg.Error, PoolTimeout, PoolClosed):
            self._changes.close(None)
        self._pool.close()


def _new_rollouts(requests: Sequence[RolloutRequest]) -> list[Rollout]:
    created = now()
    return [
        Rollout(
            id=new_id("ro"),
            task_id=request.task.id,
            input=request.task.input,
            mode=request.mode,
            group_id=request.group_id,
            max_attempts=request.max_attempts,
            created_at=created,
            metadata=request.metadata,
            run=request.run,
            key=request.key,
            sample=request.sample,
        )
        for request in requests
    ]


def _reason(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
