"""`tether train`: train an unmodified agent with RL (or SFT on its good runs) on this machine."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from tether.cli.options import add_settings, settings_from_args
from tether.cli.plot_cmd import plot
from tether.cli.secrets import JUDGE_KEY, TEACHER_KEY, add_secret_arg, secrets_of
from tether.config.commands import TrainSettings
from tether.experiment.progress import held_out_score
from tether.experiment.train import fit

if TYPE_CHECKING:
    from tether.trainer.loop import FitResult

console = Console(stderr=True)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train an agent's policy model from its own runs (GRPO-style RL, or SFT)",
        description=(
            "Each step runs the agent --group-size times on --tasks-per-step tasks, turns the recorded model "
            "calls into transitions, credits each rollout against its group (LightningRL), and updates a "
            "LoRA adapter that the engine then serves as the next policy version. Held-out accuracy on "
            "--val-tasks is measured greedily before, every --val-every steps, and after. Metrics go to "
            ".tether/runs/NAME/metrics.jsonl and TensorBoard; the curve to curves.png. Running the same "
            "command again resumes the run from its last checkpoint; --fresh starts it over."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_settings(parser, TrainSettings())
    for action in parser._actions:  # needed unless --from-sessions, which runs no agent (checked by `fit`)
        if action.dest in ("agent", "tasks"):
            action.required = False
    add_secret_arg(parser, JUDGE_KEY)
    add_secret_arg(parser, TEACHER_KEY)
    parser.set_defaults(command_main=run)


def run(args: argparse.Namespace) -> int:
    result = fit(settings_from_args(args), secrets_of(args))
    curve = plot(result.history, result.run_dir / "curves.png", result.run_dir.name)
    _report(result, curve)
    return 0


def _report(result: FitResult, curve: Path) -> None:
    validations = [r for r in result.history if r.get("kind") == "val"]
    first, last = (validations[0], validations[-1]) if validations else (None, None)
    where = f"({result.steps} steps; metrics {result.run_dir / 'metrics.jsonl'}; curve {curve})"
    if not validations and result.val_before is None:  # no held-out tasks (--from-sessions)
        Console().print(f"\n{where}")
        return
    Console().print(
        f"\n[bold]held-out accuracy before: {held_out_score(result.val_before, first)}   "
        f"after: {held_out_score(result.val_after, last)}[/]  {where}"
    )
