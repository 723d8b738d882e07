"""The learner: its seam (`base.py`: the protocol, the registry) and its first learner (`policy.py`, torch in
this process, one `Solo` or `Ranks` group: `groups.py`), with the micro-batches it packs (`batches.py`,
`packing.py`) and its Ray ranks (`ray_learner.py`). Names load torch only when the torch learner itself is
asked for."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tether.engines.openmp import prefer_passive_waiting

prefer_passive_waiting()  # before any learner module loads torch (tether/engines/openmp.py)

from tether.learner.base import Learner, TrainingDiverged, open_learner
from tether.learner.config import TrainConfig

if TYPE_CHECKING:
    from tether.learner.policy import PolicyTrainer, StepMetrics

__all__ = ["Learner", "PolicyTrainer", "StepMetrics", "TrainConfig", "TrainingDiverged", "open_learner"]


def __getattr__(name: str) -> Any:
    if name in ("PolicyTrainer", "StepMetrics"):
        return getattr(importlib.import_module("tether.learner.policy"), name)
    raise AttributeError(f"module 'tether.learner' has no attribute {name!r}")
