"""The PostgreSQL store backend (`postgresql://...` store URLs); needs the `postgres` extra (psycopg)."""

from tether.store.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
