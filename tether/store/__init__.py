"""The store: tasks, rollouts, attempts, spans, rewards and versioned resources."""

from tether.store.backends import StoreOptions, StoreURLError, open_store
from tether.store.base import InvalidTransition, NotFound, Store, StoreAuthError, StoreError
from tether.store.client import StoreClient
from tether.store.records import (
    Attempt,
    Claim,
    Resource,
    Reward,
    Rollout,
    RolloutRecord,
    RolloutRequest,
    RolloutStatus,
    Span,
    SpanEvent,
    Task,
)
from tether.store.reward_rule import final_reward, rollout_reward
from tether.store.sqlite import SQLiteStore

__all__ = [
    "Attempt",
    "Claim",
    "InvalidTransition",
    "NotFound",
    "Resource",
    "Reward",
    "Rollout",
    "RolloutRecord",
    "RolloutRequest",
    "RolloutStatus",
    "SQLiteStore",
    "Span",
    "SpanEvent",
    "Store",
    "StoreAuthError",
    "StoreClient",
    "StoreError",
    "StoreOptions",
    "StoreURLError",
    "Task",
    "final_reward",
    "open_store",
    "rollout_reward",
]
