from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


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
