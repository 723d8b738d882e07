"""The Python API: what a command runs, from its settings tree instead of its flags.

    import tether
    from tether.config import TrainSettings

    settings = TrainSettings()
    settings.agent.command = "python my_agent.py --q {question}"
    settings.tasks.file = "train.jsonl"
    settings.rewards.reward = ["my_reward.py:score"]
    result = tether.train(settings)          # what `tether train` runs, every feature included
    print(result.val_after, result.run_dir)

The tree is the one `--print-config` prints and `--config` reads, so a run started here and one started
from the shell with the same settings are the same run (and resume each other).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from tether.config.commands import TrainSettings
from tether.config.option import tree_settings, values_by_dest

if TYPE_CHECKING:
    from tether.trainer.config import FitResult


class SettingsError(ValueError):
    """Settings a command refuses, or inputs it cannot use: the message names the setting and the fix."""


def train(settings: TrainSettings) -> FitResult:
    """Train (or resume) the run `settings` describe, as `tether train` would; its FitResult."""
    from tether.cli import train_cmd

    if not isinstance(settings, TrainSettings):
        raise TypeError(f"tether.train takes a tether.config.TrainSettings, not {type(settings).__name__}")
    return _refusing(train_cmd.fit, _namespace("train", settings))


def _namespace(command: str, tree: Any) -> argparse.Namespace:
    """The command line that `tree` stands for: the command's own parser, with the tree as its defaults."""
    from tether.cli.main import build_parser, command_parser

    parser = build_parser()
    sub = command_parser(parser, [command])
    assert sub is not None
    values = values_by_dest(tree)
    for action in sub._actions:
        if action.dest in values:
            action.required = False
    sub.set_defaults(**values)
    args = parser.parse_args([command])
    missing = [s.key for s in tree_settings(type(tree)) if s.flag.required and getattr(args, s.dest) is None]
    if missing:
        raise SettingsError(f"tether {command}: set {', '.join(missing)}")
    return args


def _refusing(run: Any, args: argparse.Namespace) -> Any:
    """`run(args)`, with the one-line refusals the command line exits with raised as SettingsError."""
    try:
        return run(args)
    except SystemExit as exc:
        if isinstance(exc.code, str):
            raise SettingsError(exc.code) from None
        raise
