"""Training: the loop (`loop.py`), the learner seam (`learner.py`) and its first learner (`policy.py`,
torch in this process). Names load torch only when the torch learner itself is asked for."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tether.trainer.config import TrainConfig
from tether.trainer.learner import Learner, TrainingDiverged, open_learner

if TYPE_CHECKING:
    from tether.trainer.policy import PolicyTrainer, StepMetrics

__all__ = ["Learner", "PolicyTrainer", "StepMetrics", "TrainConfig", "TrainingDiverged", "open_learner"]


def __getattr__(name: str) -> Any:
    if name in ("PolicyTrainer", "StepMetrics"):
        return getattr(importlib.import_module("tether.trainer.policy"), name)
    raise AttributeError(f"module 'tether.trainer' has no attribute {name!r}")
