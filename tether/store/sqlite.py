"""The SQLite store: the embedded default (one WAL file per project) and the in-memory store for tests.

All statements of one store object go through one connection guarded by a lock. Claims run in
`BEGIN IMMEDIATE` transactions, which take SQLite's write lock up front, so two processes sharing a
file can never claim the same rollout.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import orjson

from tether.store.base import InvalidTransition, InvalidValue, NotFound, StoreError
from tether.store.models import (
    FINISHED_STATUSES,
    Attempt,
    Claim,
    Resource,
    Reward,
    Rollout,
    RolloutRequest,
    RolloutStatus,
    Span,
    SpanEvent,
    Task,
    new_id,
    now,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY, dataset TEXT, input TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS rollouts (
    id TEXT PRIMARY KEY, task_id TEXT NOT NULL, input TEXT NOT NULL, mode TEXT NOT NULL,
    group_id TEXT, status TEXT NOT NULL, max_attempts INTEGER NOT NULL, attempt_count INTEGER NOT NULL,
    created_at REAL NOT NULL, started_at REAL, ended_at REAL, output TEXT, error TEXT, metadata TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS rollouts_status ON rollouts (status, created_at);
CREATE INDEX IF NOT EXISTS rollouts_created ON rollouts (created_at);
CREATE TABLE IF NOT EXISTS attempts (
    rollout_id TEXT NOT NULL, number INTEGER NOT NULL, worker_id TEXT NOT NULL, status TEXT NOT NULL,
    started_at REAL NOT NULL, heartbeat_at REAL NOT NULL, ended_at REAL, error TEXT,
    PRIMARY KEY (rollout_id, number)
);
CREATE TABLE IF NOT EXISTS spans (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, rollout_id TEXT NOT NULL, attempt INTEGER,
    trace_id TEXT NOT NULL, span_id TEXT NOT NULL, parent_id TEXT, name TEXT NOT NULL, kind TEXT NOT NULL,
    start_time REAL NOT NULL, end_time REAL, status TEXT NOT NULL, status_message TEXT,
    attributes TEXT NOT NULL, events TEXT NOT NULL,
    UNIQUE (trace_id, span_id)
);
CREATE INDEX IF NOT EXISTS spans_rollout ON spans (rollout_id, seq);
CREATE INDEX IF NOT EXISTS spans_time ON spans (start_time);
CREATE TABLE IF NOT EXISTS rewards (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, rollout_id TEXT NOT NULL, attempt INTEGER, name TEXT NOT NULL,
    value REAL NOT NULL, span_id TEXT, source TEXT NOT NULL, time REAL NOT NULL, is_primary INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS rewards_rollout ON rewards (rollout_id, seq);
CREATE TABLE IF NOT EXISTS resources (
    name TEXT NOT NULL, version INTEGER NOT NULL, kind TEXT NOT NULL, value TEXT NOT NULL,
    created_at REAL NOT NULL, PRIMARY KEY (name, version)
);
"""

ROLLOUT_COLUMNS = (
    "id, task_id, input, mode, group_id, status, max_attempts, attempt_count, "
    "created_at, started_at, ended_at, output, error, metadata"
)
SPAN_COLUMNS = (
    "seq, rollout_id, attempt, trace_id, span_id, parent_id, name, kind, start_time, end_time, "
    "status, status_message, attributes, events"
)
# A waiter re-reads the database this often, to see changes made by other processes.
CROSS_PROCESS_RECHECK_S = 0.25


def _dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError as exc:  # orjson.JSONEncodeError too: e.g. an integer beyond 64 bits
        raise InvalidValue(f"cannot store this value as JSON: {exc}") from None


def _rollout(row: sqlite3.Row) -> Rollout:
    return Rollout(
        id=row["id"],
        task_id=row["task_id"],
        input=orjson.loads(row["input"]),
        mode=row["mode"],
        group_id=row["group_id"],
        status=RolloutStatus(row["status"]),
        max_attempts=row["max_attempts"],
        attempt_count=row["attempt_count"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        output=row["output"],
        error=row["error"],
        metadata=orjson.loads(row["metadata"]),
    )


def _attempt(row: sqlite3.Row) -> Attempt:
    return Attempt(**{key: row[key] for key in row.keys()})


def _span(row: sqlite3.Row) -> Span:
    return Span(
        seq=row["seq"],
        rollout_id=row["rollout_id"],
        attempt=row["attempt"],
        trace_id=row["trace_id"],
        span_id=row["span_id"],
        parent_id=row["parent_id"],
        name=row["name"],
        kind=row["kind"],
        start_time=row["start_time"],
        end_time=row["end_time"],
        status=row["status"],
        status_message=row["status_message"],
        attributes=orjson.loads(row["attributes"]),
        events=[SpanEvent(**event) for event in orjson.loads(row["events"])],
    )


def _span_row(span: Span) -> tuple[Any, ...]:
    return (
        span.rollout_id,
        span.attempt,
        span.trace_id,
        span.span_id,
        span.parent_id,
        span.name,
        span.kind,
        span.start_time,
        span.end_time,
        span.status,
        span.status_message,
        _dumps(span.attributes),
        _dumps([event.model_dump() for event in span.events]),
    )


class SQLiteStore:
    """A durable store in one SQLite file, or an in-memory one with `path=":memory:"`."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.path = str(path)
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open store database {self.path}: {exc}") from exc
        self._db.row_factory = sqlite3.Row
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        # Bumped by every change to a rollout made through this object; readers can cache rollouts
        # while it stays the same (the gateway does, on its hot path).
        self.rollouts_changed = 0
        with self._lock:
            try:
                if self.path != ":memory:":
                    self._db.execute("PRAGMA journal_mode=WAL")
                    # In WAL mode NORMAL survives a killed process; only an OS crash can lose recent commits.
                    self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.executescript(SCHEMA)
            except sqlite3.Error as exc:
                self._db.close()
                raise StoreError(f"cannot open store database {self.path}: {exc}") from exc

    @classmethod
    def in_memory(cls) -> SQLiteStore:
        return cls(":memory:")

    # -- plumbing -------------------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot write to store database {self.path}: {exc}") from exc
            try:
                yield self._db
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                raise StoreError(f"cannot write to store database {self.path}: {exc}") from exc
            except BaseException:
                self._rollback()
                raise
            self._changed.notify_all()

    def _rollback(self) -> None:
        # SQLite rolls some failed transactions back by itself; a second ROLLBACK would hide the real error.
        with suppress(sqlite3.Error):
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                return self._db.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"cannot read store database {self.path}: {exc}") from exc

    def _rollout_row(self, db: sqlite3.Connection, rollout_id: str) -> sqlite3.Row:
        row = db.execute(f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE id = ?", (rollout_id,)).fetchone()
        if row is None:
            raise NotFound("rollout", rollout_id)
        return row

    # -- rollouts -------------------------------------------------------------------------------------

    def enqueue(self, requests: Sequence[RolloutRequest]) -> list[Rollout]:
        with self._write() as db:
            return self._insert_rollouts(db, list(requests))

    def _insert_rollouts(self, db: sqlite3.Connection, requests: list[RolloutRequest]) -> list[Rollout]:
        created = now()
        rollouts = [
            Rollout(
                id=new_id("ro"),
                task_id=request.task.id,
                input=request.task.input,
                mode=request.mode,
                group_id=request.group_id,
                max_attempts=request.max_attempts,
                created_at=created,
                metadata=request.metadata,
            )
            for request in requests
        ]
        db.executemany(
            "INSERT OR IGNORE INTO tasks (id, dataset, input) VALUES (?, ?, ?)",
            [(r.task.id, r.task.dataset, _dumps(r.task.input)) for r in requests],
        )
        db.executemany(
            f"INSERT INTO rollouts ({ROLLOUT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [
                (
                    r.id,
                    r.task_id,
                    _dumps(r.input),
                    r.mode,
                    r.group_id,
                    r.status.value,
                    r.max_attempts,
                    0,
                    r.created_at,
                    None,
                    None,
                    None,
                    None,
                    _dumps(r.metadata),
                )
                for r in rollouts
            ],
        )
        return rollouts

    def claim(self, worker_id: str) -> Claim | None:
        with self._write() as db:
            row = db.execute(
                f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE status = 'queued' "
                "ORDER BY created_at, rowid LIMIT 1"
            ).fetchone()
            if row is None:
                return None
            return self._open_attempt(db, _rollout(row), worker_id)

    def _open_attempt(self, db: sqlite3.Connection, rollout: Rollout, worker_id: str) -> Claim:
        self.rollouts_changed += 1
        started = now()
        number = rollout.attempt_count + 1
        db.execute(
            "UPDATE rollouts SET status = 'running', attempt_count = ?, started_at = COALESCE(started_at, ?) "
            "WHERE id = ?",
            (number, started, rollout.id),
        )
        db.execute(
            "INSERT INTO attempts (rollout_id, number, worker_id, status, started_at, heartbeat_at) "
            "VALUES (?, ?, ?, 'running', ?, ?)",
            (rollout.id, number, worker_id, started, started),
        )
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
        request = RolloutRequest(task=Task(input=input or {}), mode=mode, metadata={"session": True})
        # One transaction, so a concurrent claim can never take the session's rollout off the queue.
        with self._write() as db:
            rollout = self._insert_rollouts(db, [request])[0]
            return self._open_attempt(db, rollout, worker_id)

    def heartbeat(self, rollout_id: str, attempt: int) -> None:
        with self._write() as db:
            cursor = db.execute(
                "UPDATE attempts SET heartbeat_at = ? "
                "WHERE rollout_id = ? AND number = ? AND status = 'running'",
                (now(), rollout_id, attempt),
            )
            if cursor.rowcount == 0:
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
        status = RolloutStatus(status)
        with self._write() as db:
            self.rollouts_changed += 1
            rollout = _rollout(self._rollout_row(db, rollout_id))
            if rollout.status in FINISHED_STATUSES:
                raise InvalidTransition(f"rollout {rollout_id} is already {rollout.status.value}")
            if status in (RolloutStatus.queued, RolloutStatus.running):
                raise InvalidTransition(f"cannot set status {status.value}; use enqueue/claim")
            current = rollout.status == RolloutStatus.running and attempt == rollout.attempt_count
            if attempt is not None and not current:
                # A stale worker (one that lost its heartbeat) must not finish the attempt that replaced it.
                raise InvalidTransition(
                    f"attempt {attempt} of rollout {rollout_id} is not running "
                    f"(rollout is {rollout.status.value}, latest attempt {rollout.attempt_count})"
                )
            number = attempt or rollout.attempt_count
            ended = now()
            if number:
                db.execute(
                    "UPDATE attempts SET status = ?, ended_at = ?, error = ? "
                    "WHERE rollout_id = ? AND number = ? AND status = 'running'",
                    (status.value, ended, error, rollout_id, number),
                )
            retry = (
                status in (RolloutStatus.failed, RolloutStatus.timed_out)
                and rollout.status == RolloutStatus.running
                and rollout.attempt_count < rollout.max_attempts
            )
            if retry:
                db.execute(
                    "UPDATE rollouts SET status = 'queued', error = ? WHERE id = ?", (error, rollout_id)
                )
            else:
                db.execute(
                    "UPDATE rollouts SET status = ?, ended_at = ?, output = COALESCE(?, output), error = ? "
                    "WHERE id = ?",
                    (status.value, ended, output, error, rollout_id),
                )
            return _rollout(self._rollout_row(db, rollout_id))

    def requeue_stale(self, heartbeat_timeout: float) -> list[str]:
        cutoff = now() - heartbeat_timeout
        stale = self._read(
            "SELECT a.rollout_id, a.number FROM attempts a JOIN rollouts r ON r.id = a.rollout_id "
            # Sessions (agents run by hand) have no worker to heartbeat them: they are never stale.
            "WHERE a.status = 'running' AND r.status = 'running' AND a.heartbeat_at < ? "
            "AND json_extract(r.metadata, '$.session') IS NOT 1",
            (cutoff,),
        )
        moved = []
        for row in stale:
            try:
                self.update_status(
                    row["rollout_id"], RolloutStatus.timed_out, error="heartbeat lost", attempt=row["number"]
                )
                moved.append(row["rollout_id"])
            except InvalidTransition:
                continue
        return moved

    def get_rollout(self, rollout_id: str) -> Rollout:
        rows = self._read(f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE id = ?", (rollout_id,))
        if not rows:
            raise NotFound("rollout", rollout_id)
        return _rollout(rows[0])

    def list_rollouts(
        self,
        *,
        status: RolloutStatus | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 100,
    ) -> list[Rollout]:
        where, params = [], []
        if status is not None:
            where.append("status = ?")
            params.append(RolloutStatus(status).value)
        if since is not None:
            where.append("created_at >= ?")
            params.append(since)
        if until is not None:
            where.append("created_at < ?")
            params.append(until)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = self._read(
            f"SELECT {ROLLOUT_COLUMNS} FROM rollouts {clause} ORDER BY created_at, rowid LIMIT ?",
            (*params, limit),
        )
        return [_rollout(row) for row in rows]

    def list_attempts(self, rollout_id: str) -> list[Attempt]:
        rows = self._read(
            "SELECT rollout_id, number, worker_id, status, started_at, heartbeat_at, ended_at, error "
            "FROM attempts WHERE rollout_id = ? ORDER BY number",
            (rollout_id,),
        )
        if not rows:
            self.get_rollout(rollout_id)  # an unknown rollout is NotFound, not an empty list
        return [_attempt(row) for row in rows]

    def wait_for(self, rollout_ids: Sequence[str], timeout: float | None = None) -> list[Rollout]:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while True:
                rollouts = [self.get_rollout(rollout_id) for rollout_id in rollout_ids]
                finished = [r for r in rollouts if r.status in FINISHED_STATUSES]
                remaining = None if deadline is None else deadline - time.monotonic()
                if len(finished) == len(rollouts) or (remaining is not None and remaining <= 0):
                    return finished
                wait = (
                    CROSS_PROCESS_RECHECK_S if remaining is None else min(remaining, CROSS_PROCESS_RECHECK_S)
                )
                self._changed.wait(wait)

    # -- spans and rewards ----------------------------------------------------------------------------

    def add_spans(self, spans: Sequence[Span]) -> None:
        if not spans:
            return
        rows = [_span_row(span) for span in spans]
        with self._write() as db:
            db.executemany(
                "INSERT OR IGNORE INTO spans (rollout_id, attempt, trace_id, span_id, parent_id, name, kind, "
                "start_time, end_time, status, status_message, attributes, events) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                rows,
            )

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
        where, params = [], []
        for column, op, value in (
            ("rollout_id", "=", rollout_id),
            ("attempt", "=", attempt),
            ("name", "=", name),
            ("start_time", ">=", since),
            ("start_time", "<", until),
        ):
            if value is not None:
                where.append(f"{column} {op} ?")
                params.append(value)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = self._read(f"SELECT {SPAN_COLUMNS} FROM spans {clause} ORDER BY seq LIMIT ?", (*params, limit))
        return [_span(row) for row in rows]

    def add_rewards(self, rewards: Sequence[Reward]) -> None:
        if not rewards:
            return
        with self._write() as db:
            for rollout_id in {reward.rollout_id for reward in rewards}:
                self._rollout_row(db, rollout_id)
            db.executemany(
                "INSERT INTO rewards (rollout_id, attempt, name, value, span_id, source, time, is_primary) "
                "VALUES (?,?,?,?,?,?,?,?)",
                [
                    (r.rollout_id, r.attempt, r.name, r.value, r.span_id, r.source, r.time, int(r.primary))
                    for r in rewards
                ],
            )

    def query_rewards(self, rollout_id: str) -> list[Reward]:
        rows = self._read(
            "SELECT rollout_id, attempt, name, value, span_id, source, time, is_primary FROM rewards "
            "WHERE rollout_id = ? ORDER BY seq",
            (rollout_id,),
        )
        return [
            Reward(
                rollout_id=row["rollout_id"],
                attempt=row["attempt"],
                name=row["name"],
                value=row["value"],
                span_id=row["span_id"],
                source=row["source"],
                time=row["time"],
                primary=bool(row["is_primary"]),
            )
            for row in rows
        ]

    # -- resources ------------------------------------------------------------------------------------

    def put_resource(self, name: str, kind: str, value: Any) -> Resource:
        created = now()
        with self._write() as db:
            (latest,) = db.execute(
                "SELECT COALESCE(MAX(version), 0) FROM resources WHERE name = ?", (name,)
            ).fetchone()
            version = latest + 1
            db.execute(
                "INSERT INTO resources (name, version, kind, value, created_at) VALUES (?,?,?,?,?)",
                (name, version, kind, _dumps(value), created),
            )
        return Resource(name=name, kind=kind, version=version, value=value, created_at=created)

    def get_resource(self, name: str, version: int | None = None) -> Resource:
        if version is None:
            rows = self._read("SELECT * FROM resources WHERE name = ? ORDER BY version DESC LIMIT 1", (name,))
        else:
            rows = self._read("SELECT * FROM resources WHERE name = ? AND version = ?", (name, version))
        if not rows:
            raise NotFound("resource", name if version is None else f"{name}@{version}")
        return self._resource(rows[0])

    def list_resources(self) -> list[Resource]:
        rows = self._read(
            "SELECT r.* FROM resources r "
            "JOIN (SELECT name, MAX(version) AS v FROM resources GROUP BY name) m "
            "ON r.name = m.name AND r.version = m.v ORDER BY r.name"
        )
        return [self._resource(row) for row in rows]

    @staticmethod
    def _resource(row: sqlite3.Row) -> Resource:
        return Resource(
            name=row["name"],
            kind=row["kind"],
            version=row["version"],
            value=orjson.loads(row["value"]),
            created_at=row["created_at"],
        )

    def close(self) -> None:
        with self._lock:
            self._db.close()


def open_store(path: str | Path | None = None) -> SQLiteStore:
    """Open the project's store: `.tether/store.db` in the current directory unless a path is given."""
    return SQLiteStore(Path(path) if path is not None else Path(".tether") / "store.db")
