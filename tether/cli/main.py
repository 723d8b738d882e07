"""The `tether` command."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import threading
from types import FrameType
from typing import Any

from tether import __version__
from tether.cli import (
    eval_cmd,
    export_cmd,
    optimize_cmd,
    plot_cmd,
    rollout_cmd,
    serve,
    store_cmd,
    train_cmd,
    transitions_cmd,
)
from tether.cli.options import config_file_in, load_config_file, print_config, resolve_lists
from tether.cli.quiet import configure_output
from tether.cli.secrets import refuse_secrets
from tether.engines.openmp import prefer_passive_waiting
from tether.experiment.errors import SettingsError


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
    for command in (
        serve,
        rollout_cmd,
        train_cmd,
        eval_cmd,
        export_cmd,
        plot_cmd,
        store_cmd,
        transitions_cmd,
        optimize_cmd,
    ):
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


class SigtermAsInterrupt:
    """While a command runs, SIGTERM (`kill`, a Kubernetes Job's or Ray's stop) interrupts it as Ctrl-C
    does, and its clean-up runs: agents stopped, interrupted rollouts queued again, the sandbox's and warm
    agents' temporary folders removed. Left to its default, SIGTERM ended the process where it stood.
    Inside asyncio the interrupt leaves the event loop between two task steps, so no task is stopped
    half-way through a step (SIGINT may be ignored, as in a script's background job, so asyncio's own
    Ctrl-C handler is not there to rely on). `received` tells the two signals apart for the exit status."""

    def __init__(self) -> None:
        self.received = False
        self._previous: Any = None

    def __enter__(self) -> SigtermAsInterrupt:
        main_thread = threading.current_thread() is threading.main_thread()
        if main_thread and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:  # nobody else's to keep
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.received = True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop here: raised where the main thread is, as Ctrl-C is
            raise KeyboardInterrupt from None
        loop.call_soon_threadsafe(_interrupt)  # between two steps of its tasks, never inside one


def _interrupt() -> None:
    """Out of the event loop; asyncio then cancels every task, whose clean-up runs at its await."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    prefer_passive_waiting()
    words = sys.argv[1:] if argv is None else argv
    refuse_secrets(words)
    args = parse_command_line(words)
    if getattr(args, "print_config", False):
        print_config(args)
        return 0
    configure_output(getattr(args, "verbose", False), args.command in MODEL_COMMANDS)
    sigterm = SigtermAsInterrupt()
    try:
        with sigterm:
            return int(args.command_main(args) or 0)
    except SettingsError as exc:  # one line naming the setting and the fix, as argparse's own errors
        raise SystemExit(str(exc)) from None
    except KeyboardInterrupt:
        return 128 + signal.SIGTERM if sigterm.received else 130


def parse_command_line(words: list[str]) -> argparse.Namespace:
    """A command line as the command gets it: its `--config` file's keys, then the flags given."""
    parser = build_parser()
    config_file = config_file_in(words)
    if config_file is not None:
        command = command_parser(parser, words)
        if command is not None:
            load_config_file(command, config_file, command.prog)
    args = parser.parse_args(words)
    resolve_lists(args)
    return args


def command_parser(parser: argparse.ArgumentParser, words: list[str]) -> argparse.ArgumentParser | None:
    """The subcommand's parser that a command line names (its first word that is a command)."""
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for word in words:
        if word in commands.choices:
            return commands.choices[word]
    return None


if __name__ == "__main__":
    sys.exit(main())
