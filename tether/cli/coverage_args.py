"""`--val-k`, `--val-k-temperature`, `--no-base-coverage`, `--val-pass-reward`: held-out coverage
(pass@k, mean@k) beside the greedy validation (`tether.trainer.coverage`)."""

from __future__ import annotations

import argparse

from tether.trainer.coverage import CoverageConfig


def coverage_config(args: argparse.Namespace) -> CoverageConfig:
    """The coverage settings of the command line (a ValueError for a bad one)."""
    return CoverageConfig(
        k=args.val_k,
        temperature=args.val_k_temperature,
        pass_reward=args.val_pass_reward,
        at_start=not args.no_base_coverage,
    )
