"""Fixtures shared by every test folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rigs import GatewayRig, make_engine_rig


@pytest.fixture(scope="session")
def tiny_engine() -> Iterator[object]:
    from tether.engines import TransformersEngine

    engine = TransformersEngine("tiny-random", max_batch_size=8)
    yield engine
    engine.close()


@pytest.fixture
def engine_rig(tmp_path: Path, tiny_engine: object) -> Iterator[GatewayRig]:
    yield from make_engine_rig(tmp_path, tiny_engine)
