"""The built-in engine's settings and its command-line group; importing this loads no model."""

from __future__ import annotations

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
