"""The trainer's settings that the command line gathers into their configs: held-out coverage
(`tether.trainer.coverage`) and the curriculum (`tether.curriculum.pools`)."""

from __future__ import annotations

import argparse

from tether.curriculum.pools import CurriculumConfig
from tether.trainer.coverage import CoverageConfig


def coverage_config(args: argparse.Namespace) -> CoverageConfig:
    """The coverage settings of the command line (a ValueError for a bad one)."""
    return CoverageConfig(
        k=args.val_k,
        temperature=args.val_k_temperature,
        pass_reward=args.val_pass_reward,
        at_start=not args.no_base_coverage,
    )


def curriculum_config(args: argparse.Namespace) -> CurriculumConfig:
    """The curriculum settings of the command line; raises CurriculumError for a bad combination."""
    return CurriculumConfig(
        retire_after=args.retire_after,
        park_after=args.park_after,
        revisit_every=args.revisit_every,
        mixed_first=args.mixed_first,
        success=args.success_reward,
        history_runs=tuple(dict.fromkeys(args.curriculum_from or ())),
        probe=args.probe,
    )
