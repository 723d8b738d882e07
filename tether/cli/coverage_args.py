"""`--val-k`, `--val-k-temperature`, `--no-base-coverage`, `--val-pass-reward`: held-out coverage
(pass@k, mean@k) beside the greedy validation (`tether.trainer.coverage`)."""

from __future__ import annotations

import argparse

from tether.trainer.coverage import CoverageConfig


def add_coverage_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--val-k",
        type=int,
        default=0,
        metavar="K",
        help="each validation also samples every held-out task K times at --val-k-temperature and records "
        "pass@K (a task passes when one sample does) and mean@K, with their 95%% intervals: what RL can "
        "sharpen beyond greedy pass@1. 0: greedy only",
    )
    parser.add_argument(
        "--val-k-temperature", type=float, default=1.0, help="the temperature of the --val-k samples"
    )
    parser.add_argument(
        "--no-base-coverage",
        action="store_true",
        help="skip the --val-k samples at the validation before training (greedy pass@1 still runs): "
        "the base model's coverage is the same for every seed, so one run of a sweep measures it",
    )
    parser.add_argument(
        "--val-pass-reward",
        type=float,
        default=1.0,
        help="a held-out rollout passes (pass@1, pass@K) when its reward is at least this",
    )


def coverage_config(args: argparse.Namespace) -> CoverageConfig:
    """The coverage settings of the command line (a ValueError for a bad one)."""
    return CoverageConfig(
        k=args.val_k,
        temperature=args.val_k_temperature,
        pass_reward=args.val_pass_reward,
        at_start=not args.no_base_coverage,
    )
