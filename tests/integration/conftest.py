"""Rigs for the framework tests: a real gateway and store, with a scripted upstream or the tiny engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.fake_upstream import Behaviour
from tests.helpers import serve_app
from tests.integration.scripted_upstream import Script, create_scripted_upstream
from tests.integration.support import Scripted, Session, open_session
from tests.rigs import GatewayRig, make_rig


@pytest.fixture
def script() -> Script:
    return Script(turns=[])


@pytest.fixture
def scripted_rig(tmp_path: Path, script: Script) -> Iterator[GatewayRig]:
    with serve_app(create_scripted_upstream(script)) as url:
        yield from make_rig(tmp_path, url + "/v1", Behaviour())


@pytest.fixture
def scripted(scripted_rig: GatewayRig, script: Script) -> Scripted:
    """A session on a gateway whose model plays `script.turns` (fill them in the test)."""
    return Scripted(script, open_session(scripted_rig))


@pytest.fixture
def engine_session(engine_rig: GatewayRig) -> Session:
    """A session on a gateway whose model is the built-in engine with the tiny random model."""
    return open_session(engine_rig)
