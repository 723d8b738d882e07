"""What the training loop needs from a learner: one update, the servable weights of a version,
checkpoints, and logprobs. `PolicyTrainer` (`tether.learner.policy`, torch in this process) is the first.

    learner = open_learner("local", train_config)

A learner is a module with a factory, registered here by kind: adding one (a multi-rank learner, say) is
a new module plus one `register` line below. The loop knows only the protocol and this registry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from tether.adapters.transitions import Transition
from tether.algorithms.advantages import AdvantageBatch, Sample
from tether.learner.config import TrainConfig
from tether.learner.errors import LearnerLost, TrainingDiverged

__all__ = [
    "Learner",
    "LearnerLost",
    "StepReport",
    "TrainingDiverged",
    "close_learner",
    "open_learner",
    "register",
]
from tether.policy_server.base import PolicyWeights
from tether.registry import Registry


class StepReport(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


class Learner(Protocol):
    def step(self, batch: AdvantageBatch) -> StepReport:
        """One optimizer update on the batch (raises TrainingDiverged, leaving the weights as they were)."""
        ...

    def save_weights(self, directory: Path, version: int) -> PolicyWeights:
        """Write the servable policy (a LoRA adapter or the whole model) into its own new folder."""
        ...

    def save_checkpoint(self, directory: Path, extra: dict[str, Any] | None = None) -> Path: ...

    def load_checkpoint(self, directory: Path) -> dict[str, Any]:
        """Restore a checkpoint; returns the `extra` it was saved with."""
        ...

    def logprobs(self, samples: Sequence[Sample | Transition]) -> list[list[float]]: ...


Factory = Callable[[TrainConfig], Learner]
LEARNERS: Registry[Factory] = Registry("learner")
register = LEARNERS.register


def open_learner(kind: str, config: TrainConfig) -> Learner:
    return LEARNERS.get(kind)(config)


def close_learner(learner: Learner) -> None:
    """Release what a learner holds outside this process (a multi-rank learner's actors). Closing is
    optional in the protocol: a learner without `close` holds nothing that outlives it."""
    close = getattr(learner, "close", None)
    if callable(close):
        close()


def _local(config: TrainConfig) -> Learner:
    from tether.learner.policy import PolicyTrainer

    return PolicyTrainer(config)


register("local", _local)
