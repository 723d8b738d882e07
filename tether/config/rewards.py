"""How a rollout is scored."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tether.config.option import Identity, option


@dataclass
class RewardSettings:
    """How a rollout is scored: evaluators, judges, reward servers and their weights."""

    reward: list[str] | None = option(
        None,
        "how rollouts are scored; give it more than once for several rewards. MODULE:FUNCTION or "
        "file.py:FUNCTION: an evaluator (task, output[, trace]) -> float or {name: float}, given "
        "the whole task, its 'reference' (the fields no agent sees) included. judge:RUBRIC.md: an"
        " LLM judge at --judge-url grades each rollout against the rubric (reward 'judge', 0 to "
        "1). judge-rank:RUBRIC.md (tether train): the judge scores each group's rollouts "
        "together, relative to one another (reward 'judge_rank', the training reward; held-out "
        "rollouts are scored by the other --reward sources). http(s)://URL: a reward-model "
        'server, POSTed {"task", "output", "calls", "agent_reported"} (calls: the model calls the'
        " gateway recorded; agent_reported: the spans the agent sent itself), answering "
        '{"reward": X} or {"rewards": {NAME: X}}',
        metavar="SPEC",
        run=Identity(
            "name", value=lambda specs, tree: reward_record(specs or [], tree.rewards.reward_weights)
        ),
    )
    reward_weights: str | None = option(
        None,
        "the reward is the weighted sum of these named rewards (e.g. format=0.2,judge=0.8); the "
        "named ones are kept beside it",
        metavar="NAME=W,...",
    )
    judge_url: str | None = option(
        None,
        "the judge's OpenAI-compatible endpoint, ending in /v1",
        metavar="URL",
    )
    judge_model: str = option(
        "judge",
        "the model name to ask for",
        metavar="NAME",
    )
    reward_timeout: float = option(
        60.0,
        "per call of a judge or reward server (default 60)",
        metavar="SECONDS",
    )
    reward_retries: int = option(
        2,
        "retries of a judge or reward server call that failed or answered out of format (default 2)",
        metavar="N",
    )
    primary_reward: str | None = option(
        None,
        "which named reward of a dict is the reward",
        metavar="NAME",
        run={"rollout": Identity("name"), "optimize-prompt": Identity("name")},
    )


def reward_record(specs: list[str], weights: str | None) -> Any:
    """What a run records of its rewards: one spec as given (as runs always did), several as a list."""
    if weights:
        return {"sources": specs, "weights": weights}
    return specs[0] if len(specs) == 1 else (specs or None)
