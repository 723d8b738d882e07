"""The SQLite store: the embedded default (one WAL file per project) and the in-memory store for tests.

All statements of one store object go through one connection guarded by a lock. Claims run in
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

import orjson

from tether.contracts import Meta
from tether.filemodes import PRIVATE_DIR, PRIVATE_FILE, make_private
from tether.store import lifecycle, sqlite_query
from tether.store.base import InvalidTransition, NotFound, StoreError
from tether.store.codec import dumps, span_conditions, span_of, span_values
from tether.store.models import (
    Attempt,
    Claim,
    Resource,
    Reward,
    Rollout,
    RolloutPage,
    RolloutQuery,
    RolloutRequest,
    RolloutRow,
    RolloutStatus,
    Span,
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
    created_at REAL NOT NULL, started_at REAL, ended_at REAL, output TEXT, error TEXT, metadata TEXT NOT NULL,
    run TEXT, key TEXT, sample INTEGER NOT NULL DEFAULT 0, worker_losses INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS attempts (
    rollout_id TEXT NOT NULL, number INTEGER NOT NULL, worker_id TEXT NOT NULL, status TEXT NOT NULL,
    started_at REAL NOT NULL, heartbeat_at REAL NOT NULL, ended_at REAL, error TEXT,
    PRIMARY KEY (rollout_id, number)
);
CREATE TABLE IF NOT EXISTS spans (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, rollout_id TEXT NOT NULL, attempt INTEGER,
    trace_id TEXT NOT NULL, span_id TEXT NOT NULL, parent_id TEXT, name TEXT NOT NULL, kind TEXT NOT NULL,
    start_time REAL NOT NULL, end_time REAL, status TEXT NOT NULL, status_message TEXT,
    attributes TEXT NOT NULL, events TEXT NOT NULL, origin TEXT NOT NULL,
    UNIQUE (rollout_id, trace_id, span_id)
);
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
# Columns added after the first release, with their definitions: older store files get them on open.
ADDED_ROLLOUT_COLUMNS = {
    "run": "TEXT",
    "key": "TEXT",
    "sample": "INTEGER NOT NULL DEFAULT 0",
    "worker_losses": "INTEGER NOT NULL DEFAULT 0",
}
INDEXES = """
CREATE INDEX IF NOT EXISTS spans_rollout ON spans (rollout_id, seq);
CREATE INDEX IF NOT EXISTS spans_time ON spans (start_time);
CREATE INDEX IF NOT EXISTS rollouts_status ON rollouts (status, created_at);
CREATE INDEX IF NOT EXISTS rollouts_created ON rollouts (created_at);
CREATE INDEX IF NOT EXISTS rollouts_run ON rollouts (run, status, created_at);
CREATE INDEX IF NOT EXISTS rollouts_run_created ON rollouts (run, created_at);
CREATE UNIQUE INDEX IF NOT EXISTS rollouts_run_key ON rollouts (run, key) WHERE key IS NOT NULL;
"""

ROLLOUT_COLUMNS = (
    "id, task_id, input, mode, group_id, status, max_attempts, attempt_count, "
    "created_at, started_at, ended_at, output, error, metadata, run, key, sample, worker_losses"
)
SPAN_COLUMNS = (
    "seq, rollout_id, attempt, trace_id, span_id, parent_id, name, kind, start_time, end_time, "
    "status, status_message, attributes, events, origin"
)
# Stores made before spans had an origin and per-rollout span ids: the table is rebuilt on open. Their
# spans were recorded before agents' spans were told apart, so they keep counting as the gateway's.
SPANS_V1_UNIQUE = "UNIQUE (trace_id, span_id)"
SPANS_V1_COLUMNS = (
    "seq, rollout_id, attempt, trace_id, span_id, parent_id, name, kind, start_time, end_time, "
    "status, status_message, attributes, events"
)
# A waiter re-reads the database this often, to see changes made by other processes.
CROSS_PROCESS_RECHECK_S = 0.25


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
        run=row["run"],
        key=row["key"],
        sample=row["sample"],
        worker_losses=row["worker_losses"],
    )


def _attempt(row: sqlite3.Row) -> Attempt:
    return Attempt(**{key: row[key] for key in row.keys()})


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


class SQLiteStore:
    """A durable store in one SQLite file, or an in-memory one with `path=":memory:"`."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.path = str(path)
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
                _create_private(Path(self.path))
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open store database {self.path}: {exc}") from exc
        self._db.row_factory = sqlite3.Row
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        # Bumped by every change to a rollout made through this object (see `rollouts_epoch`).
        self._rollout_changes = 0
        with self._lock:
            try:
                if self.path != ":memory:":
                    self._db.execute("PRAGMA journal_mode=WAL")
                    # In WAL mode NORMAL survives a killed process; only an OS crash can lose recent commits.
                    self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.executescript(SCHEMA)
                self._add_missing_columns()
                self._upgrade_spans_table()
                self._db.executescript(INDEXES)
            except sqlite3.Error as exc:
                self._db.close()
                raise StoreError(f"cannot open store database {self.path}: {exc}") from exc

    @classmethod
    def in_memory(cls) -> SQLiteStore:
        return cls(":memory:")

    def _add_missing_columns(self) -> None:
        present = {row["name"] for row in self._db.execute("PRAGMA table_info(rollouts)")}
        for column, definition in ADDED_ROLLOUT_COLUMNS.items():
            if column not in present:
                self._db.execute(f"ALTER TABLE rollouts ADD COLUMN {column} {definition}")

    def _upgrade_spans_table(self) -> None:
        (sql,) = self._db.execute("SELECT sql FROM sqlite_master WHERE name = 'spans'").fetchone()
        if SPANS_V1_UNIQUE not in sql:
            return
        table = SCHEMA[SCHEMA.index("CREATE TABLE IF NOT EXISTS spans") :].split(");", 1)[0] + ");"
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.execute("ALTER TABLE spans RENAME TO spans_v1")
            self._db.execute("DROP INDEX IF EXISTS spans_rollout")
            self._db.execute("DROP INDEX IF EXISTS spans_time")
            self._db.execute(table)
            self._db.execute(
                f"INSERT INTO spans ({SPANS_V1_COLUMNS}, origin) "
                f"SELECT {SPANS_V1_COLUMNS}, 'gateway' FROM spans_v1"
            )
            self._db.execute("DROP TABLE spans_v1")
            self._db.execute("COMMIT")
        except sqlite3.Error:
            self._rollback()
            raise

    def rollouts_epoch(self) -> Hashable:
        if self.path == ":memory:":
            return self._rollout_changes
        # Other processes sharing the file change rollouts without bumping our counter: the second
        # part makes every cached rollout at most CROSS_PROCESS_RECHECK_S old.
        return (self._rollout_changes, int(time.monotonic() / CROSS_PROCESS_RECHECK_S))

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
        requests = list(requests)
        with self._write() as db:
            existing = self._existing_keys(db, requests)
            new = [r for r in requests if (r.run, r.key) not in existing]
            created = iter(self._insert_rollouts(db, new))
            return [existing.get((r.run, r.key)) or next(created) for r in requests]

    def _existing_keys(
        self, db: sqlite3.Connection, requests: list[RolloutRequest]
    ) -> dict[tuple[str | None, str | None], Rollout]:
        keyed = {(r.run, r.key) for r in requests if r.run is not None and r.key is not None}
        found: dict[tuple[str | None, str | None], Rollout] = {}
        for run in {run for run, _ in keyed}:
            rows = db.execute(
                f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE run = ? AND key IS NOT NULL", (run,)
            ).fetchall()
            for row in rows:
                if (run, row["key"]) in keyed:
                    found[(run, row["key"])] = _rollout(row)
        return found

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
                run=request.run,
                key=request.key,
                sample=request.sample,
            )
            for request in requests
        ]
        db.executemany(
            "INSERT OR IGNORE INTO tasks (id, dataset, input) VALUES (?, ?, ?)",
            [(r.task.id, r.task.dataset, dumps(r.task.input)) for r in requests],
        )
        db.executemany(
            f"INSERT INTO rollouts ({ROLLOUT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [
                (
                    r.id,
                    r.task_id,
                    dumps(r.input),
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
                    dumps(r.metadata),
                    r.run,
                    r.key,
                    r.sample,
                    0,
                )
                for r in rollouts
            ],
        )
        return rollouts

    def claim(self, worker_id: str, run: str | None = None) -> Claim | None:
        with self._write() as db:
            if run is None:
                row = db.execute(
                    f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE status = 'queued' "
                    "ORDER BY created_at, rowid LIMIT 1"
                ).fetchone()
            else:
                row = db.execute(
                    f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE run = ? AND status = 'queued' "
                    "ORDER BY created_at, rowid LIMIT 1",
                    (run,),
                ).fetchone()
            if row is None:
                return None
            return self._open_attempt(db, _rollout(row), worker_id)

    def _open_attempt(self, db: sqlite3.Connection, rollout: Rollout, worker_id: str) -> Claim:
        self._rollout_changes += 1
        started = now()
        number = lifecycle.next_attempt(rollout)
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
        request = RolloutRequest(task=Task(input=input or {}), mode=mode, metadata={Meta.SESSION: True})
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
        with self._write() as db:
            rollout = _rollout(self._rollout_row(db, rollout_id))
            closing = lifecycle.close_attempt(rollout, status, attempt)
            return self._apply(db, rollout, closing, output, error)

    def abandon(self, rollout_id: str, attempt: int, reason: str) -> Rollout:
        with self._write() as db:
            rollout = _rollout(self._rollout_row(db, rollout_id))
            closing = lifecycle.abandon_attempt(rollout, attempt)
            return self._apply(db, rollout, closing, None, reason)

    def _apply(
        self,
        db: sqlite3.Connection,
        rollout: Rollout,
        closing: lifecycle.Closing,
        output: str | None,
        error: str | None,
    ) -> Rollout:
        self._rollout_changes += 1
        ended = now()
        if closing.attempt:
            db.execute(
                "UPDATE attempts SET status = ?, ended_at = ?, error = ? "
                "WHERE rollout_id = ? AND number = ? AND status = 'running'",
                (closing.attempt_status.value, ended, error, rollout.id, closing.attempt),
            )
        if closing.requeued:
            db.execute(
                "UPDATE rollouts SET status = 'queued', error = ?, worker_losses = ? WHERE id = ?",
                (error, closing.worker_losses, rollout.id),
            )
        else:
            db.execute(
                "UPDATE rollouts SET status = ?, ended_at = ?, output = COALESCE(?, output), error = ?, "
                "worker_losses = ? WHERE id = ?",
                (closing.rollout_status.value, ended, output, error, closing.worker_losses, rollout.id),
            )
        return _rollout(self._rollout_row(db, rollout.id))

    def requeue_stale(self, heartbeat_timeout: float) -> list[str]:
        cutoff = now() - heartbeat_timeout
        stale = self._read(
            "SELECT a.rollout_id, a.number FROM attempts a JOIN rollouts r ON r.id = a.rollout_id "
            "WHERE a.status = 'running' AND r.status = 'running' AND a.heartbeat_at < ?",
            (cutoff,),
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
        run: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Rollout]:
        where: list[str] = []
        params: list[Any] = []
        if run is not None:
            where.append("run = ?")
            params.append(run)
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
            f"SELECT {ROLLOUT_COLUMNS} FROM rollouts {clause} ORDER BY created_at, rowid LIMIT ? OFFSET ?",
            (*params, limit, offset),
        )
        return [_rollout(row) for row in rows]

    def query_rollouts(self, query: RolloutQuery) -> RolloutPage:
        sql, params = sqlite_query.page_sql(query)
        count, count_params = sqlite_query.count_sql(query)
        with self._lock:  # the page and its count, with no write of this store between them
            rows = self._read(sql, params)
            (total,) = self._read(count, count_params)[0]
        page = [RolloutRow(rollout=_rollout(row), reward=row["reward"], worker=row["worker"]) for row in rows]
        capped = total > query.count_cap
        return RolloutPage(rows=page, total=min(total, query.count_cap), total_capped=capped)

    def rename_run(self, run: str, new_name: str) -> int:
        with self._write() as db:
            self._rollout_changes += 1
            return db.execute("UPDATE rollouts SET run = ? WHERE run = ?", (new_name, run)).rowcount

    def list_runs(self) -> list[str]:
        rows = self._read(
            "SELECT run FROM rollouts WHERE run IS NOT NULL GROUP BY run ORDER BY MIN(created_at), run"
        )
        return [row["run"] for row in rows]

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
                finished = [r for r in rollouts if r.status.finished]
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
        rows = [span_values(span) for span in spans]
        with self._write() as db:
            db.executemany(
                "INSERT OR IGNORE INTO spans (rollout_id, attempt, trace_id, span_id, parent_id, name, kind, "
                "start_time, end_time, status, status_message, attributes, events, origin) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
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
        clause, params = span_conditions(
            "?", rollout_id=rollout_id, attempt=attempt, name=name, since=since, until=until
        )
        rows = self._read(f"SELECT {SPAN_COLUMNS} FROM spans {clause} ORDER BY seq LIMIT ?", (*params, limit))
        return [span_of(row) for row in rows]

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
                (name, version, kind, dumps(value), created),
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
