"""The evaluator: execution match. 1 if the predicted SQL returns the gold SQL's rows on the task's database.
The gold SQL is the task's `reference.gold_sql`, which the agent never sees.

Rows are compared as multisets, or as lists when the gold query has an ORDER BY. Both queries run on a
read-only connection with a time limit, under an authorizer that lets a statement only read: the model's
SQL runs in Tether's process, and a read-only connection still runs `VACUUM INTO` (a file written
anywhere), `ATTACH` and pragmas. SQL that does not parse, errors, is refused, runs too long or returns too
many rows scores 0. Markdown fences around the model's SQL are stripped.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

TIME_LIMIT_S = 5.0
MAX_ROWS = 100_000
PROGRESS_EVERY = 10_000  # SQLite virtual-machine instructions between deadline checks
FENCE = re.compile(r"```[ \t]*(?:sqlite|sql)?[ \t]*\n?(.*?)(?:```|$)", re.IGNORECASE | re.DOTALL)
ORDER_BY = re.compile(r"\border\s+by\b", re.IGNORECASE)
FLOAT_DIGITS = 6
# What a query may do: select, read columns, call SQL functions, recurse in a WITH. Nothing else is
# authorized (ATTACH, which VACUUM INTO does first, PRAGMA, writes, transactions, schema changes).
READ_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)


class QueryError(Exception):
    """The query failed, ran past the time limit, or returned too many rows."""


def strip_fences(text: str) -> str:
    """The SQL inside a ```sql fence if there is one, else the text; trailing semicolons removed."""
    match = FENCE.search(text)
    sql = match.group(1) if match else text
    return sql.strip().rstrip(";").strip()


def only_reads(action: int, *_: str | None) -> int:
    """The connection's authorizer: reading is allowed, every other action is refused when prepared."""
    return sqlite3.SQLITE_OK if action in READ_ACTIONS else sqlite3.SQLITE_DENY


def _normalise(value: Any) -> Any:
    return round(value, FLOAT_DIGITS) if isinstance(value, float) else value


def execute(db_path: str, sql: str, time_limit_s: float = TIME_LIMIT_S) -> list[tuple[Any, ...]]:
    """Run one statement on a read-only connection that authorizes only reads; raise QueryError on any
    failure or refusal."""
    deadline = time.monotonic() + time_limit_s
    try:
        db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise QueryError(f"cannot open {db_path}: {exc}") from None
    with contextlib.closing(db):
        db.set_authorizer(only_reads)
        # A non-zero return interrupts the statement with "interrupted".
        db.set_progress_handler(lambda: int(time.monotonic() > deadline), PROGRESS_EVERY)
        try:
            cursor = db.execute(sql)
            rows = cursor.fetchmany(MAX_ROWS + 1)
        except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError) as exc:
            raise QueryError(str(exc)) from None
    if len(rows) > MAX_ROWS:
        raise QueryError(f"more than {MAX_ROWS} rows")
    return [tuple(_normalise(value) for value in row) for row in rows]


def same_result(predicted: Sequence[tuple[Any, ...]], gold: Sequence[tuple[Any, ...]], ordered: bool) -> bool:
    if ordered:
        return list(predicted) == list(gold)
    return Counter(predicted) == Counter(gold)


def execution_match(task: dict, output: str | None) -> float:
    """1.0 if the predicted SQL's rows equal the gold SQL's rows on the task's database, else 0.0."""
    predicted = strip_fences(output or "")
    if not predicted:
        return 0.0
    gold_sql = task["reference"]["gold_sql"]
    gold = execute(task["db"], gold_sql)  # a broken gold query is the task's fault: let it raise
    try:
        rows = execute(task["db"], predicted)
    except QueryError:
        return 0.0
    return float(same_result(rows, gold, ordered=ORDER_BY.search(gold_sql) is not None))
