"""The PostgreSQL store: the `Store` interface over a database server that workers on many hosts share
(the SQL store over the PostgreSQL dialect, see dialect.py)."""

from __future__ import annotations

from tether.store.postgres.dialect import PostgresDialect, redacted
from tether.store.sql.store import SQLStore

POOL_SIZE = 16

__all__ = ["POOL_SIZE", "PostgresStore", "redacted"]


class PostgresStore(SQLStore):
    """A store in a PostgreSQL database named by a `postgresql://user:password@host:port/db` URL."""

    def __init__(self, url: str, *, pool_size: int = POOL_SIZE) -> None:
        dialect = PostgresDialect(url, pool_size)
        super().__init__(dialect)
        self.url = url
        self.where = dialect.where
        self._spans = dialect.spans

    @property
    def span_commits(self) -> int:
        """Transactions that wrote spans (fewer than `add_spans` calls when callers write at once)."""
        return self._spans.commits
