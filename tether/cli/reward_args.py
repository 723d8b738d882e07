"""`--reward` and its companions, shared by rollout, train and optimize-prompt: which reward sources score
the rollouts (`tether.rewards`), read and checked before anything runs."""

from __future__ import annotations

import argparse

from tether.cli.secrets import JUDGE_KEY, secret_value
from tether.rewards import RewardOptions, combine, parse_weights, reward_source
from tether.rewards.rank import GroupScorer
from tether.rewards.sources import split_sources
from tether.runner.rewards import Evaluator, RewardError


def rewards_from_args(args: argparse.Namespace) -> tuple[Evaluator | None, GroupScorer | None]:
    """The evaluator of each rollout the options describe, and the scorer of whole groups (only `tether
    train` samples groups, and sets `rank_groups`), each None if not given; RewardError on a bad one."""
    specs: list[str] = args.reward or []
    weights = parse_weights(args.reward_weights) if args.reward_weights else None
    if weights and not specs:
        raise SystemExit("tether: --reward-weights needs --reward")
    if not specs:
        return None, None
    options = RewardOptions(
        judge_url=args.judge_url,
        judge_model=args.judge_model,
        judge_key=secret_value(args, JUDGE_KEY) or "none",
        timeout_s=args.reward_timeout,
        retries=args.reward_retries,
    )
    each, group = split_sources([reward_source(spec, options) for spec in specs])
    if group is not None and not getattr(args, "rank_groups", False):
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
