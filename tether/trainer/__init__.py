"""Training: the policy update that turns weighted, advantage-carrying samples into new weights.

The names load torch on first use, so that importing `tether.trainer.metrics` (the CLI does) stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.trainer.policy import PolicyTrainer, StepMetrics, TrainConfig, TrainingDiverged

__all__ = ["PolicyTrainer", "StepMetrics", "TrainConfig", "TrainingDiverged"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("tether.trainer.policy"), name)
    raise AttributeError(f"module 'tether.trainer' has no attribute {name!r}")
