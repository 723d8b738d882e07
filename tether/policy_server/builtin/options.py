"""The built-in engine's settings and its command-line group; importing this loads no model."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class BuiltinOptions:
    max_batch_size: int = 8
    threads: int | None = None  # torch threads (None: torch's default)
    adapter: Path | None = None  # a LoRA adapter folder to serve (`tether serve --adapter`)


def add_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("built-in engine (--engine builtin)")
    group.add_argument(
        "--max-batch-size",
        type=int,
        default=8,
        help="built-in engine: requests per batch (a rollout with nothing running may still join a full "
        "batch, so that no rollout waits behind another's long generations)",
    )


def options_from_args(args: argparse.Namespace) -> BuiltinOptions:
    adapter = getattr(args, "adapter", None)
    return BuiltinOptions(
        max_batch_size=getattr(args, "max_batch_size", 8),
        adapter=None if adapter is None else Path(adapter),
    )
