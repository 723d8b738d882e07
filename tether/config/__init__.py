"""Settings trees: each command's settings as typed dataclasses, the product its flags and config files
are made from (`tether.cli.options`, `files.py`).

    from tether.config import TrainSettings
    settings = TrainSettings()
    settings.learner.algorithm = "rloo"
"""

from __future__ import annotations

from tether.config.commands import (
    OptimizePromptSettings,
    RolloutSettings,
    ServeSettings,
    TrainSettings,
    TransitionsExportSettings,
)
from tether.config.files import ConfigFileError, dump_config, read_config

__all__ = [
    "ConfigFileError",
    "OptimizePromptSettings",
    "RolloutSettings",
    "ServeSettings",
    "TrainSettings",
    "TransitionsExportSettings",
    "dump_config",
    "read_config",
]
