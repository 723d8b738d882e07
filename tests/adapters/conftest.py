from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.store import SQLiteStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "store.db")
    yield store
    store.close()
