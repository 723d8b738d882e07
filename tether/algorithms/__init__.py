"""RL algorithms: credit assignment from rewards to per-token training signal."""

from tether.algorithms.advantages import (
    METHODS,
    AdvantageBatch,
    AdvantageMethod,
    AdvantageReport,
    DemonstrationInRLBatch,
    Sample,
    assign_advantages,
    group_advantages,
    imitation_batch,
    rewards_to_go,
    rollout_returns,
)

__all__ = [
    "METHODS",
    "AdvantageBatch",
    "AdvantageMethod",
    "AdvantageReport",
    "DemonstrationInRLBatch",
    "Sample",
    "assign_advantages",
    "group_advantages",
    "imitation_batch",
    "rewards_to_go",
    "rollout_returns",
]
