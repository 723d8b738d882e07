"""The curriculum's flags, made from its settings section, gathered into its config."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from tether.cli.options import add_settings
from tether.cli.trainer_args import curriculum_config
from tether.config.training import CurriculumSettings
from tether.curriculum.pools import CurriculumConfig


@dataclass
class CurriculumTree:
    curriculum: CurriculumSettings = field(default_factory=CurriculumSettings)


def test_the_command_line_options() -> None:
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_settings(parser, CurriculumTree())
    args = parser.parse_args(
        "--retire-after 3 --park-after 5 --revisit-every 10 --mixed-first --success-reward 0.8 "
        "--curriculum-from a --curriculum-from b".split()
    )
    assert curriculum_config(args) == CurriculumConfig(
        retire_after=3, park_after=5, revisit_every=10, mixed_first=True, success=0.8, history_runs=("a", "b")
    )
    assert not curriculum_config(parser.parse_args([])).enabled
    for flag in ("--retire-after", "--park-after", "--revisit-every", "--mixed-first", "--curriculum-from"):
        assert flag in parser.format_help()
