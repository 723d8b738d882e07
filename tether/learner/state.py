"""A learner's checkpoint on disk: its file names, the random state it restores, and the folder swap
that makes a save atomic."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

CHECKPOINT_STATE = "state.pt"
CHECKPOINT_EXTRA = "extra.json"
CHECKPOINT_POLICY = "policy"


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@contextlib.contextmanager
def atomic_dir(target: Path) -> Iterator[Path]:
    """Write a folder under a temporary name, then swap it into place (replacing any previous one)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex}"
    old = target.parent / f".{target.name}.old-{uuid.uuid4().hex}"
    tmp.mkdir()
    try:
        yield tmp
        if target.exists():
            os.replace(target, old)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
