"""Tether: train existing AI agents with reinforcement learning, with zero changes to their code."""

from tether.store import Reward, Rollout, RolloutRequest, RolloutStatus, Span, SQLiteStore, Task, open_store

__version__ = "0.1.0"

__all__ = [
    "Reward",
    "Rollout",
    "RolloutRequest",
    "RolloutStatus",
    "SQLiteStore",
    "Span",
    "Task",
    "__version__",
    "open_store",
]
