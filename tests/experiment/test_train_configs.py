"""The curriculum's flags, made from its settings section, gathered into its config."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from tether.cli.main import build_parser
from tether.cli.options import add_settings, settings_from_args
from tether.config.commands import TrainSettings
from tether.config.training import CurriculumSettings
from tether.curriculum.pools import CurriculumConfig
from tether.experiment.train import curriculum_config, learner_config


@dataclass
class CurriculumTree:
    curriculum: CurriculumSettings = field(default_factory=CurriculumSettings)


def from_flags(args: argparse.Namespace) -> CurriculumConfig:
    """The curriculum config of a training run whose curriculum section the flags set."""
    return curriculum_config(TrainSettings(curriculum=settings_from_args(args).curriculum))


def test_the_command_line_options() -> None:
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_settings(parser, CurriculumTree())
    args = parser.parse_args(
        "--retire-after 3 --park-after 5 --revisit-every 10 --mixed-first --success-reward 0.8 "
        "--curriculum-from a --curriculum-from b".split()
    )
    assert from_flags(args) == CurriculumConfig(
        retire_after=3, park_after=5, revisit_every=10, mixed_first=True, success=0.8, history_runs=("a", "b")
    )
    assert not from_flags(parser.parse_args([])).enabled
    for flag in ("--retire-after", "--park-after", "--revisit-every", "--mixed-first", "--curriculum-from"):
        assert flag in parser.format_help()


def test_a_cosine_rl_schedule_falls_over_every_update_of_the_run() -> None:
    def decay_steps(*flags: str) -> int:
        args = build_parser().parse_args(["train", "--agent", "a", "--tasks", "t.jsonl", *flags])
        return learner_config(settings_from_args(args)).rl_decay_steps

    assert decay_steps("--steps", "10", "--ppo-epochs", "2", "--rl-schedule", "cosine") == 20
    assert decay_steps("--steps", "10", "--ppo-epochs", "2") == 0  # constant by default
