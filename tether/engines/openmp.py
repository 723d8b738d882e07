"""OpenMP's waiting policy for processes that run the model (the CLI, the engine, the trainer).

Model threads share a few cores with agent processes; OpenMP's default busy-waiting then slows generation
by an order of magnitude (measured: 2.2 vs 31 tokens/s on 2 cores). It must be set before torch loads, and
only in Tether's own model processes: never in an agent that merely imports `tether`.
"""

from __future__ import annotations

import os


def prefer_passive_waiting() -> None:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
