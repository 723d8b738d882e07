"""Training: the policy update that turns weighted, advantage-carrying samples into new weights."""

from tether.trainer.policy import PolicyTrainer, StepMetrics, TrainConfig, TrainingDiverged

__all__ = ["PolicyTrainer", "StepMetrics", "TrainConfig", "TrainingDiverged"]
