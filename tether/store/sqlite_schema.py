"""The SQLite store's schema: created on open, and brought up to date in older store files."""

from __future__ import annotations

import sqlite3
from contextlib import suppress

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

# Stores made before spans had an origin and per-rollout span ids: the table is rebuilt on open. Their
# spans were recorded before agents' spans were told apart, so they keep counting as the gateway's.
SPANS_V1_UNIQUE = "UNIQUE (trace_id, span_id)"
SPANS_V1_COLUMNS = (
    "seq, rollout_id, attempt, trace_id, span_id, parent_id, name, kind, start_time, end_time, "
    "status, status_message, attributes, events"
)


def create(db: sqlite3.Connection) -> None:
    """The tables and indexes, on a new file or an older one (autocommit connection)."""
    db.executescript(SCHEMA)
    _add_missing_columns(db)
    _upgrade_spans_table(db)
    db.executescript(INDEXES)


def _add_missing_columns(db: sqlite3.Connection) -> None:
    present = {row[1] for row in db.execute("PRAGMA table_info(rollouts)")}
    for column, definition in ADDED_ROLLOUT_COLUMNS.items():
        if column not in present:
            db.execute(f"ALTER TABLE rollouts ADD COLUMN {column} {definition}")


def _upgrade_spans_table(db: sqlite3.Connection) -> None:
    (sql,) = db.execute("SELECT sql FROM sqlite_master WHERE name = 'spans'").fetchone()
    if SPANS_V1_UNIQUE not in sql:
        return
    table = SCHEMA[SCHEMA.index("CREATE TABLE IF NOT EXISTS spans") :].split(");", 1)[0] + ");"
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("ALTER TABLE spans RENAME TO spans_v1")
        db.execute("DROP INDEX IF EXISTS spans_rollout")
        db.execute("DROP INDEX IF EXISTS spans_time")
        db.execute(table)
        db.execute(
            f"INSERT INTO spans ({SPANS_V1_COLUMNS}, origin) "
            f"SELECT {SPANS_V1_COLUMNS}, 'gateway' FROM spans_v1"
        )
        db.execute("DROP TABLE spans_v1")
        db.execute("COMMIT")
    except sqlite3.Error:
        with suppress(sqlite3.Error):  # SQLite may have rolled back already
            if db.in_transaction:
                db.execute("ROLLBACK")
        raise
