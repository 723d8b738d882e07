"""Which reward sources score the rollouts (`tether.rewards`), read from the rewards settings and checked
before anything runs."""

from __future__ import annotations

from tether.config.rewards import RewardSettings
from tether.experiment.errors import SettingsError
from tether.rewards import RewardOptions, combine, parse_weights, reward_source
from tether.rewards.rank import GroupScorer
from tether.rewards.sources import split_sources
from tether.runner.rewards import Evaluator, RewardError


def rewards_of(
    settings: RewardSettings, judge_key: str | None, *, rank_groups: bool = False
) -> tuple[Evaluator | None, GroupScorer | None]:
    """The evaluator of each rollout the settings describe, and the scorer of whole groups (only training
    samples groups: `rank_groups`), each None if not given; RewardError on a bad one."""
    specs: list[str] = settings.reward or []
    weights = parse_weights(settings.reward_weights) if settings.reward_weights else None
    if weights and not specs:
        raise SettingsError("tether: --reward-weights needs --reward")
    if not specs:
        return None, None
    options = RewardOptions(
        judge_url=settings.judge_url,
        judge_model=settings.judge_model,
        judge_key=judge_key or "none",
        timeout_s=settings.reward_timeout,
        retries=settings.reward_retries,
    )
    each, group = split_sources([reward_source(spec, options) for spec in specs])
    if group is not None and not rank_groups:
        raise RewardError(
            "--reward judge-rank:... ranks the rollouts of a group, which only tether train samples: "
            "use judge:RUBRIC.md to grade each rollout"
        )
    if group is not None and weights and group.name in weights:
        raise RewardError(
            f"--reward-weights cannot name {group.name!r}: a group's ranking is its training reward on its "
            "own; the weights combine the rewards of each rollout"
        )
    if weights and not each:
        raise RewardError("--reward-weights combines the rewards of each rollout, and no --reward gives one")
    return (combine(each, weights) if each else None), group
