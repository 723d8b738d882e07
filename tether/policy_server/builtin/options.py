"""The built-in engine's settings and its command-line group; importing this loads no model."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

# Rows decoded together. A decode step streams the weights once whatever its rows, so on 2 CPU cores 24
# concurrent calls of SmolLM2-135M made 1.8x the tokens/s at 24 rows as at 8 (bench/step_speed.py).
DEFAULT_MAX_BATCH_SIZE = 32


@dataclass(frozen=True)
class BuiltinOptions:
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    threads: int | None = None  # torch threads (None: torch's default)
    adapter: Path | None = None  # a LoRA adapter folder to serve (`tether serve --adapter`)
    prefix_cache_mb: float | None = None  # prompt keys and values kept for reuse (None: the engine's default)


def add_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("built-in engine (--engine builtin)")
    group.add_argument(
        "--max-batch-size",
        type=int,
        default=DEFAULT_MAX_BATCH_SIZE,
        help="built-in engine: requests per batch (a rollout with nothing running may still join a full "
        "batch, so that no rollout waits behind another's long generations)",
    )
    group.add_argument(
        "--prefix-cache-mb",
        type=float,
        default=None,
        help="built-in engine: MiB of the model device's memory for the keys and values of prompts and "
        "responses, so that a group's samples and a conversation's next turn prefill only their new "
        "tokens (default 512; 0 disables it)",
    )


def options_from_args(args: argparse.Namespace) -> BuiltinOptions:
    adapter = getattr(args, "adapter", None)
    return BuiltinOptions(
        max_batch_size=getattr(args, "max_batch_size", DEFAULT_MAX_BATCH_SIZE),
        prefix_cache_mb=getattr(args, "prefix_cache_mb", None),
        adapter=None if adapter is None else Path(adapter),
    )
