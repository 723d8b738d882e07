"""Reward sources beyond a Python function: an LLM judge, a reward-model server, and several combined
(`tether.rewards.sources`). The runner scores each rollout with whichever it is given."""

from tether.rewards.judge import Judge
from tether.rewards.remote import RemoteReward
from tether.rewards.sources import (
    Combined,
    RewardOptions,
    combine,
    evaluator_files,
    parse_weights,
    register,
    reward_source,
)

__all__ = [
    "Combined",
    "Judge",
    "RemoteReward",
    "RewardOptions",
    "combine",
    "evaluator_files",
    "parse_weights",
    "register",
    "reward_source",
]
