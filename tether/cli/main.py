"""The `tether` command."""

from __future__ import annotations

import argparse
import sys

from tether import __version__
from tether.cli import optimize_cmd, plot_cmd, rollout_cmd, serve, store_cmd, train_cmd, transitions_cmd
from tether.cli.quiet import configure_output
from tether.cli.secrets import refuse_secrets
from tether.engines.openmp import prefer_passive_waiting


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tether",
        description=(
            "Train existing AI agents with reinforcement learning inside their own harness. "
            "Agents only change OPENAI_BASE_URL: every model call is recorded with its token ids."
        ),
    )
    parser.add_argument("--version", action="version", version=f"tether {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in (serve, rollout_cmd, train_cmd, plot_cmd, store_cmd, transitions_cmd, optimize_cmd):
        command.add_parser(commands)
    for sub in (parser, *commands.choices.values()):
        sub.add_argument(
            "-v",
            "--verbose",
            action="store_true",
            default=argparse.SUPPRESS,  # given before or after the command, either counts
            help="show Tether's info lines and the warnings and progress bars of its libraries "
            "(transformers, PEFT, torch), which are silenced otherwise",
        )
    return parser


# Commands that load a model (the built-in engine or the learner), so silencing its libraries is worth
# importing them.
MODEL_COMMANDS = frozenset({"train", "serve", "rollout", "optimize-prompt"})


def main(argv: list[str] | None = None) -> int:
    prefer_passive_waiting()
    refuse_secrets(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    configure_output(getattr(args, "verbose", False), args.command in MODEL_COMMANDS)
    try:
        return int(args.command_main(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
