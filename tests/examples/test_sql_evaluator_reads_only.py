"""The sql_agent evaluator runs the model's SQL in Tether's process: its connection may only read. What a
read-only connection still lets through (VACUUM INTO writes a file anywhere, ATTACH, pragmas) is refused,
scores 0, and leaves no file behind."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.examples.support import Example

reward = Example("sql_agent").load("reward")
GOLD = "SELECT COUNT(*) FROM artist"
REFUSED = r"not authorized|authorization denied"  # SQLite's two words for the authorizer's no
ESCAPES = [
    "VACUUM INTO '{out}'",
    "VACUUM",
    "ATTACH DATABASE '{out}' AS copy",
    "PRAGMA user_version = 7",
    "PRAGMA journal_mode = DELETE",
    "PRAGMA table_info(artist)",
    "SELECT * FROM pragma_table_info('artist')",
    "SELECT load_extension('{out}')",
    "CREATE TEMP TABLE copy AS SELECT * FROM artist",
    "DELETE FROM artist",
    "BEGIN IMMEDIATE",
    "SAVEPOINT outside",
    "ANALYZE",
]


@pytest.fixture(scope="module")
def chinook_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Example("sql_agent").load("chinook").database_path(tmp_path_factory.mktemp("chinook"))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("escape", ESCAPES)
def test_an_escape_from_reading_is_refused_scores_0_and_writes_nothing(
    chinook_db: Path, tmp_path: Path, escape: str
) -> None:
    sql = escape.format(out=tmp_path / "out.db")
    database = digest(chinook_db)
    beside = sorted(p.name for p in chinook_db.parent.iterdir())
    with pytest.raises(reward.QueryError, match=REFUSED):
        reward.execute(str(chinook_db), sql)
    assert reward.execution_match({"db": str(chinook_db), "reference": {"gold_sql": GOLD}}, sql) == 0.0
    assert list(tmp_path.iterdir()) == []
    assert sorted(p.name for p in chinook_db.parent.iterdir()) == beside
    assert digest(chinook_db) == database


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT name FROM artist WHERE id < 3 ORDER BY id",
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3) SELECT SUM(i) FROM n",
        "SELECT (SELECT MAX(id) FROM album), COUNT(*) FROM track JOIN genre ON genre.id = track.genre_id",
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'artist'",
    ],
)
def test_reads_are_still_run(chinook_db: Path, sql: str) -> None:
    assert reward.execute(str(chinook_db), sql)
