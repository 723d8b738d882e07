"""`SQLStore`: the `Store` interface in SQL, once, over a `Dialect` (SQLite, PostgreSQL).

It owns the transactions, claims, queries and the rollout lifecycle (`tether.store.lifecycle`); the
dialect says how each database does what differs. Every rollout-changing transaction reports the rollouts
it changed when it commits, which moves the rollout epoch and wakes `wait_for` callers.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from tether.contracts import Meta
from tether.store import lifecycle
from tether.store.base import InvalidTransition, NotFound, StoreError
from tether.store.records import (
    Attempt,
    Claim,
    Resource,
    Reward,
    Rollout,
    RolloutPage,
    RolloutQuery,
    RolloutRecord,
    RolloutRequest,
    RolloutStatus,
    Span,
    Task,
    new_id,
    now,
)
from tether.store.rollout_query import query_rollouts_by_scanning
from tether.store.sql import rows
from tether.store.sql.dialect import Dialect, Tx, insert_rollouts
from tether.store.sql.rows import (
    ATTEMPT_COLUMNS,
    RESOURCE_COLUMNS,
    REWARD_COLUMNS,
    ROLLOUT_COLUMNS,
    SPAN_COLUMNS,
)

SELECT_ROLLOUT = f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE id = ?"
OPEN_ATTEMPT = (
    "INSERT INTO attempts (rollout_id, number, worker_id, status, started_at, heartbeat_at) "
    "VALUES (?, ?, ?, 'running', ?, ?)"
)
CLOSE_ATTEMPT = (
    "UPDATE attempts SET status = ?, ended_at = ?, error = ? WHERE rollout_id = ? AND number = ? "
    "AND status = 'running'"
)
REQUEUE = "status = 'queued', error = ?, worker_losses = ?"
FINISH = "status = ?, ended_at = ?, output = COALESCE(?, output), error = ?, worker_losses = ?"
FROM_REQUEST = {"mode", "group_id", "max_attempts", "metadata", "run", "key", "sample"}
READ_CHUNK = 500  # rollouts per statement of `read_rollouts`: bounds each statement and its answer
# What `read_rollouts` reads beside the rollout: (table and record field, columns, order within a rollout,
# row -> model).
RECORD_PARTS = (
    ("attempts", ATTEMPT_COLUMNS, "number", rows.attempt),
    ("spans", SPAN_COLUMNS, "seq", rows.span),
    ("rewards", REWARD_COLUMNS, "seq", rows.reward),
)
STALE = (
    "SELECT a.rollout_id, a.number FROM attempts a JOIN rollouts r ON r.id = a.rollout_id "
    "WHERE a.status = 'running' AND r.status = 'running' AND a.heartbeat_at < ?"
)


class SQLStore:
    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.syntax = dialect.syntax

    def rollouts_epoch(self) -> Hashable:
        return self.dialect.epoch()

    @contextmanager
    def _write(self) -> Iterator[Tx]:
        with self.dialect.transaction() as tx:
            yield tx
        if tx.changed or tx.any_changed:
            self.dialect.changes.changed(None if tx.any_changed else tx.changed)

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[rows.Row]:
        return self.dialect.read(sql, params)

    def _locked_rollout(self, tx: Tx, rollout_id: str) -> Rollout:
        row = tx.one(SELECT_ROLLOUT + self.syntax.row_lock, (rollout_id,))
        if row is None:
            raise NotFound("rollout", rollout_id)
        return rows.rollout(row)

    def _rollouts(self, rollout_ids: Sequence[str]) -> dict[str, Rollout]:
        condition, param = self.dialect.any_of("id", rollout_ids)
        found = self._read(f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE {condition}", (param,))
        by_id = {row["id"]: rows.rollout(row) for row in found}
        for rollout_id in rollout_ids:
            if rollout_id not in by_id:
                raise NotFound("rollout", rollout_id)
        return by_id

    # -- rollouts -------------------------------------------------------------------------------------

    def enqueue(self, requests: Sequence[RolloutRequest]) -> list[Rollout]:
        requests = list(requests)
        if not any(r.run is not None and r.key is not None for r in requests):
            rollouts = _new_rollouts(requests)  # nothing to look up first: one bulk copy
            if rollouts:
                self.dialect.copy_rollouts(_task_rows(requests), [rows.rollout_values(r) for r in rollouts])
            return rollouts
        with self._write() as tx:
            existing = self._existing_keys(tx, requests)
            created = self._insert_rollouts(tx, [r for r in requests if (r.run, r.key) not in existing])
            lost = self._lost_races(tx, created)
            if lost:  # another process enqueued the same (run, key) meanwhile: theirs is the rollout
                existing.update(self._existing_keys(tx, lost))
                created = [r for r in created if (r.run, r.key) not in existing]
            fresh = iter(created)
            return [existing.get((r.run, r.key)) or next(fresh) for r in requests]

    def _existing_keys(self, tx: Tx, requests: Sequence[RolloutRequest | Rollout]) -> dict[Any, Rollout]:
        by_run: dict[str, list[str]] = {}
        for r in requests:
            if r.run is not None and r.key is not None:
                by_run.setdefault(r.run, []).append(r.key)
        found: dict[Any, Rollout] = {}
        for run, keys in by_run.items():
            condition, param = self.dialect.any_of("key", keys)
            for row in tx.rows(
                f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE run = ? AND {condition}", (run, param)
            ):
                found[(run, row["key"])] = rows.rollout(row)
        return found

    def _insert_rollouts(self, tx: Tx, requests: list[RolloutRequest]) -> list[Rollout]:
        rollouts = _new_rollouts(requests)
        insert_rollouts(tx, _task_rows(requests), [rows.rollout_values(r) for r in rollouts])
        return rollouts

    def _lost_races(self, tx: Tx, created: list[Rollout]) -> list[Rollout]:
        keyed = [r for r in created if r.run is not None and r.key is not None]
        if not keyed:
            return []
        condition, param = self.dialect.any_of("id", [r.id for r in keyed])
        inserted = {row["id"] for row in tx.rows(f"SELECT id FROM rollouts WHERE {condition}", (param,))}
        return [r for r in keyed if r.id not in inserted]

    def claim(self, worker_id: str, run: str | None = None) -> Claim | None:
        in_run, params = ("", ()) if run is None else ("AND run = ? ", (run,))
        head = (
            f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE status = 'queued' {in_run}"
            f"ORDER BY created_at, {self.syntax.order_key} LIMIT 1{self.syntax.claim_lock}"
        )
        with self._write() as tx:
            row = tx.one(head, params)
            return None if row is None else self._open_attempt(tx, rows.rollout(row), worker_id)

    def _open_attempt(self, tx: Tx, rollout: Rollout, worker_id: str) -> Claim:
        started = now()
        number = rollout.attempt_count + 1
        tx.run(
            "UPDATE rollouts SET status = 'running', attempt_count = ?, started_at = COALESCE(started_at, ?) "
            "WHERE id = ?",
            (number, started, rollout.id),
        )
        tx.run(OPEN_ATTEMPT, (rollout.id, number, worker_id, started, started))
        tx.changed.append(rollout.id)
        update = {
            "status": RolloutStatus.running,
            "attempt_count": number,
            "started_at": rollout.started_at or started,
        }
        attempt = Attempt(
            rollout_id=rollout.id,
            number=number,
            worker_id=worker_id,
            started_at=started,
            heartbeat_at=started,
        )
        return Claim(rollout=rollout.model_copy(update=update), attempt=attempt)

    def start_session(
        self, input: dict[str, Any] | None = None, worker_id: str = "session", mode: str = "session"
    ) -> Claim:
        request = RolloutRequest(task=Task(input=input or {}), mode=mode, metadata={Meta.SESSION: True})
        with self._write() as tx:  # one transaction: no claim can take the session's rollout first
            rollout = self._insert_rollouts(tx, [request])[0]
            return self._open_attempt(tx, rollout, worker_id)

    def heartbeat(self, rollout_id: str, attempt: int) -> None:
        with self._write() as tx:
            beats = tx.run(
                "UPDATE attempts SET heartbeat_at = ? "
                "WHERE rollout_id = ? AND number = ? AND status = 'running'",
                (now(), rollout_id, attempt),
            )
            if beats == 0:
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
        self, tx: Tx, rollout: Rollout, closing: lifecycle.Closing, output: str | None, error: str | None
    ) -> Rollout:
        ended = now()
        if closing.attempt:
            tx.run(CLOSE_ATTEMPT, (closing.attempt_status.value, ended, error, rollout.id, closing.attempt))
        tx.changed.append(rollout.id)
        if closing.requeued:
            return self._update_rollout(tx, rollout.id, REQUEUE, (error, closing.worker_losses))
        params = (closing.rollout_status.value, ended, output, error, closing.worker_losses)
        return self._update_rollout(tx, rollout.id, FINISH, params)

    def _update_rollout(self, tx: Tx, rollout_id: str, changes: str, params: Sequence[Any]) -> Rollout:
        update = f"UPDATE rollouts SET {changes} WHERE id = ?"
        if self.syntax.returning:
            row = tx.one(f"{update} RETURNING {ROLLOUT_COLUMNS}", (*params, rollout_id))
        else:
            tx.run(update, (*params, rollout_id))
            row = tx.one(SELECT_ROLLOUT, (rollout_id,))
        assert row is not None  # the row is locked: it cannot have gone
        return rows.rollout(row)

    def requeue_stale(self, heartbeat_timeout: float) -> list[str]:
        moved = []
        for row in self._read(STALE, (now() - heartbeat_timeout,)):
            try:
                self.abandon(row["rollout_id"], row["number"], "heartbeat lost")
                moved.append(row["rollout_id"])
            except InvalidTransition:  # a session, or closed meanwhile
                continue
        return moved

    def get_rollout(self, rollout_id: str) -> Rollout:
        found = self._read(SELECT_ROLLOUT, (rollout_id,))
        if not found:
            raise NotFound("rollout", rollout_id)
        return rows.rollout(found[0])

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
        value = None if status is None else RolloutStatus(status).value
        where, params = _conditions(
            ("run", "=", run), ("status", "=", value), *_window("created_at", since, until)
        )
        found = self._read(
            f"SELECT {ROLLOUT_COLUMNS} FROM rollouts {where} "
            f"ORDER BY created_at, {self.syntax.order_key} LIMIT ? OFFSET ?",
            (*params, limit, offset),
        )
        return [rows.rollout(row) for row in found]

    def query_rollouts(self, query: RolloutQuery) -> RolloutPage:
        page = self.dialect.query_rollouts(query)
        return query_rollouts_by_scanning(self, query) if page is None else page

    def rename_run(self, run: str, new_name: str) -> int:
        with self._write() as tx:
            tx.any_changed = True
            return tx.run("UPDATE rollouts SET run = ? WHERE run = ?", (new_name, run))

    def list_runs(self) -> list[str]:
        found = self._read(
            "SELECT run FROM rollouts WHERE run IS NOT NULL GROUP BY run "
            f"ORDER BY MIN(created_at), run{self.syntax.bytewise}"
        )
        return [row["run"] for row in found]

    def list_attempts(self, rollout_id: str) -> list[Attempt]:
        found = self._read(
            f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE rollout_id = ? ORDER BY number", (rollout_id,)
        )
        if not found:
            self.get_rollout(rollout_id)  # an unknown rollout is NotFound, not an empty list
        return [rows.attempt(row) for row in found]

    def wait_for(self, rollout_ids: Sequence[str], timeout: float | None = None) -> list[Rollout]:
        ids = list(rollout_ids)
        deadline = None if timeout is None else time.monotonic() + timeout
        finished: dict[str, Rollout] = {}
        with self.dialect.changes.watching(ids) as waiter:  # before reading: a change from now on wakes it
            while True:
                waiter.event.clear()
                pending = [rollout_id for rollout_id in dict.fromkeys(ids) if rollout_id not in finished]
                if pending:
                    fresh = self._rollouts(pending)
                    finished.update((i, r) for i, r in fresh.items() if r.status.finished)
                remaining = None if deadline is None else deadline - time.monotonic()
                if all(i in finished for i in ids) or (remaining is not None and remaining <= 0):
                    return [finished[i] for i in ids if i in finished]
                waits = [wait for wait in (remaining, self.dialect.recheck_s) if wait is not None]
                waiter.event.wait(min(waits) if waits else None)

    # -- spans and rewards ----------------------------------------------------------------------------

    def add_spans(self, spans: Sequence[Span]) -> None:
        if spans:
            # Serialized here, by the caller: a value that cannot be JSON fails its own call only.
            self.dialect.copy_spans([rows.span_values(span) for span in spans])

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
        where, params = _conditions(
            ("rollout_id", "=", rollout_id),
            ("attempt", "=", attempt),
            ("name", "=", name),
            *_window("start_time", since, until),
        )
        found = self._read(f"SELECT {SPAN_COLUMNS} FROM spans {where} ORDER BY seq LIMIT ?", (*params, limit))
        return [rows.span(row) for row in found]

    def add_rewards(self, rewards: Sequence[Reward]) -> None:
        if not rewards:
            return
        written = self.dialect.copy_rewards([rows.reward_values(reward) for reward in rewards])
        if written != len(rewards):  # none written: a rollout is unknown (rollouts are never deleted)
            self._rollouts(sorted({reward.rollout_id for reward in rewards}))
            raise StoreError(f"the store wrote {written} of {len(rewards)} rewards")

    def query_rewards(self, rollout_id: str) -> list[Reward]:
        found = self._read(
            f"SELECT {REWARD_COLUMNS} FROM rewards WHERE rollout_id = ? ORDER BY seq", (rollout_id,)
        )
        return [rows.reward(row) for row in found]

    def read_rollouts(self, rollout_ids: Sequence[str]) -> list[RolloutRecord]:
        wanted = list(dict.fromkeys(rollout_ids))
        records: dict[str, RolloutRecord] = {}
        for start in range(0, len(wanted), READ_CHUNK):
            records.update(self._read_records(wanted[start : start + READ_CHUNK]))
        return [records[rollout_id] for rollout_id in rollout_ids]

    def _read_records(self, rollout_ids: Sequence[str]) -> dict[str, RolloutRecord]:
        """These rollouts' records: one statement per table."""
        rollouts = self._rollouts(rollout_ids)
        records = {rollout_id: RolloutRecord(rollout=rollout) for rollout_id, rollout in rollouts.items()}
        condition, param = self.dialect.any_of("rollout_id", rollout_ids)
        for table, columns, order, model in RECORD_PARTS:
            found = self._read(
                f"SELECT {columns} FROM {table} WHERE {condition} ORDER BY rollout_id, {order}", (param,)
            )
            for row in found:
                getattr(records[row["rollout_id"]], table).append(model(row))
        return records

    # -- resources ------------------------------------------------------------------------------------

    def put_resource(self, name: str, kind: str, value: Any) -> Resource:
        created = now()
        text = rows.dumps(value)
        with self._write() as tx:
            if self.syntax.name_lock:  # writers of one name take turns, so each gets the next version
                tx.run(self.syntax.name_lock, (name,))
            latest = tx.one("SELECT COALESCE(MAX(version), 0) AS v FROM resources WHERE name = ?", (name,))
            version = int(latest["v"]) + 1 if latest else 1
            tx.run(self.syntax.insert("resources", RESOURCE_COLUMNS), (name, version, kind, text, created))
        return Resource(name=name, kind=kind, version=version, value=value, created_at=created)

    def get_resource(self, name: str, version: int | None = None) -> Resource:
        select = f"SELECT {RESOURCE_COLUMNS} FROM resources WHERE name = ?"
        if version is None:
            found = self._read(f"{select} ORDER BY version DESC LIMIT 1", (name,))
        else:
            found = self._read(f"{select} AND version = ?", (name, version))
        if not found:
            raise NotFound("resource", name if version is None else f"{name}@{version}")
        return rows.resource(found[0])

    def list_resources(self) -> list[Resource]:
        found = self._read(
            "SELECT r.* FROM resources r "
            "JOIN (SELECT name, MAX(version) AS v FROM resources GROUP BY name) m "
            f"ON r.name = m.name AND r.version = m.v ORDER BY r.name{self.syntax.bytewise}"
        )
        return [rows.resource(row) for row in found]

    def close(self) -> None:
        self.dialect.close()


def _new_rollouts(requests: Sequence[RolloutRequest]) -> list[Rollout]:
    created = now()
    return [
        Rollout(
            id=new_id("ro"),
            task_id=request.task.id,
            input=request.task.input,
            created_at=created,
            **request.model_dump(include=FROM_REQUEST),
        )
        for request in requests
    ]


def _task_rows(requests: Sequence[RolloutRequest]) -> list[tuple[Any, ...]]:
    return [rows.task_values(request) for request in requests]


Condition = tuple[str, str, Any]


def _window(column: str, since: float | None, until: float | None) -> tuple[Condition, Condition]:
    return (column, ">=", since), (column, "<", until)


def _conditions(*conditions: Condition) -> tuple[str, list[Any]]:
    """`WHERE ...` (or nothing) and its parameters, for the conditions whose value is given."""
    given = [(column, op, value) for column, op, value in conditions if value is not None]
    where = " AND ".join(f"{column} {op} ?" for column, op, _ in given)
    return (f"WHERE {where}" if where else ""), [value for _, _, value in given]
