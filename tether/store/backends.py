"""`open_store(url)`: the one place a store backend is chosen, by URL.

    .tether/store.db, sqlite:///abs/path.db, sqlite://rel/path.db   the embedded SQLite file (default)
    memory:                                                         an in-memory store (tests, scratch)
    http://host:port, https://...                                   a remote `tether serve` (admin token)
    postgresql://user:password@host:port/db (or postgres://)        a PostgreSQL database (tether[postgres])

A backend is a module with a factory `(url, options) -> Store`, registered here with `register`; adding
one (PostgreSQL, say) is a new module plus one `register("postgresql", ...)` line below.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from tether.registry import Registry
from tether.store.base import Store, StoreError

STORE_ENV = "TETHER_STORE"
TOKEN_ENV = "TETHER_TOKEN"


class StoreURLError(StoreError, ValueError):
    """A store URL with an unknown scheme, or one that cannot name a store."""


@dataclass(frozen=True)
class StoreOptions:
    """What a backend may need beside its URL: the project directory, and a token for remote stores."""

    project_dir: Path = Path(".")
    token: str | None = None


Factory = Callable[[str, StoreOptions], Store]
BACKENDS: Registry[Factory] = Registry("store URL scheme")
register = BACKENDS.register
schemes = BACKENDS.kinds


def default_store_url(project_dir: str | Path = ".") -> str:
    """`--store` unset: TETHER_STORE, else the project's SQLite file."""
    return os.environ.get(STORE_ENV) or str(Path(project_dir) / ".tether" / "store.db")


def scheme_of(url: str) -> str:
    if url.startswith("memory:"):
        return "memory"
    parts = urlsplit(url)
    # A bare path (or a Windows drive letter) is a SQLite file.
    if not parts.scheme or len(parts.scheme) == 1:
        return "sqlite"
    return parts.scheme.lower()


def open_store(url: str | Path | None = None, options: StoreOptions | None = None) -> Store:
    """Open the store `url` names (default: TETHER_STORE, else `.tether/store.db` of the project).

    Raises StoreURLError for an unknown scheme and StoreError when the store cannot be opened or reached.
    """
    options = options or StoreOptions()
    text = str(url) if url is not None else default_store_url(options.project_dir)
    scheme = scheme_of(text)
    factory = BACKENDS.find(scheme)
    if factory is None:
        raise StoreURLError(
            f"unknown store URL scheme {scheme!r} in {text!r}: use a file path, sqlite:///PATH, memory:, "
            f"http(s)://HOST:PORT or postgresql://USER@HOST:PORT/DB (known schemes: {', '.join(schemes())})"
        )
    return factory(text, options)


def sqlite_path(url: str, project_dir: Path) -> Path:
    """The file a SQLite store URL names: a path, sqlite:///abs/path or sqlite://relative/path."""
    path = url
    if url.lower().startswith("sqlite:"):
        path = url[len("sqlite:") :]
        path = path[2:] if path.startswith("//") else path
        if not path:
            raise StoreURLError(f"the store URL {url!r} names no file: use sqlite:///PATH")
    resolved = Path(path)
    return resolved if resolved.is_absolute() else project_dir / resolved


def _sqlite(url: str, options: StoreOptions) -> Store:
    from tether.store.sqlite import SQLiteStore

    return SQLiteStore(sqlite_path(url, options.project_dir))


def _memory(url: str, options: StoreOptions) -> Store:
    from tether.store.sqlite import SQLiteStore

    return SQLiteStore(":memory:")


def _http(url: str, options: StoreOptions) -> Store:
    from tether.store.client import StoreClient

    token = options.token or os.environ.get(TOKEN_ENV) or _project_admin_token(options.project_dir)
    if not token:
        raise StoreError(
            f"the remote store {url} needs the admin token: set {TOKEN_ENV}, or copy the server's "
            ".tether/admin_token into this project"
        )
    client = StoreClient(url, token)
    client.ping()
    return client


def _postgres(url: str, options: StoreOptions) -> Store:
    try:
        from tether.store.postgres import PostgresStore
    except ImportError as exc:
        raise StoreError(
            f"the PostgreSQL store needs psycopg ({exc}): pip install 'tether[postgres]'"
        ) from None
    return PostgresStore(url)


def _project_admin_token(project_dir: Path) -> str | None:
    path = project_dir / ".tether" / "admin_token"
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


register("sqlite", _sqlite)
register("memory", _memory)
register("http", _http)
register("https", _http)
register("postgresql", _postgres)
register("postgres", _postgres)
