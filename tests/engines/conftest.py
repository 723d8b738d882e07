from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.engines.catalog import TINY_RANDOM, resolve_model


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tether-models")


@pytest.fixture(scope="session")
def tiny_path(model_cache: Path) -> Path:
    return resolve_model(TINY_RANDOM, model_cache)


@pytest.fixture(scope="session")
def engine(tiny_path: Path) -> Iterator:
    from tether.engines.transformers_engine import TransformersEngine

    eng = TransformersEngine(str(tiny_path), name="tiny-random", max_batch_size=8)
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def reference_model(tiny_path: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_path).eval()
