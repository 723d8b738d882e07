from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.fake_upstream import Behaviour, create_fake_upstream
from tests.helpers import serve_app
from tests.rigs import GatewayRig, make_rig


@pytest.fixture
def behaviour() -> Behaviour:
    return Behaviour()


@pytest.fixture
def upstream_url(behaviour: Behaviour) -> Iterator[str]:
    with serve_app(create_fake_upstream(behaviour)) as url:
        yield url + "/v1"


@pytest.fixture
def rig(tmp_path: Path, upstream_url: str, behaviour: Behaviour) -> Iterator[GatewayRig]:
    yield from make_rig(tmp_path, upstream_url, behaviour)
