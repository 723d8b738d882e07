"""Tether: train existing AI agents with reinforcement learning, with zero changes to their code.

For agents: `tether.emit_reward`, `tether.span`, `tether.traced`, `tether.get_prompt`. For training:
`tether.train(tether.TrainSettings(...))` runs what `tether train` runs (examples/python_api.py; keys from
`tether.Secrets` or the environment); below it,
`tether.Trainer(tether.TrainerConfig(...), ...).fit(agent, train_tasks, val_tasks, evaluator)` with a
`tether.CommandAgent` or `tether.CallableAgent`; `tether.open_store(url)` opens a store.

Importing `tether` loads nothing and changes nothing in the importing process: each name is imported on
first use, so an agent that only reports rewards does not load the store, the runner or pydantic.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.config import TrainSettings
    from tether.experiment.errors import SettingsError
    from tether.experiment.secrets import Secrets
    from tether.experiment.train import train
    from tether.learner.config import TrainConfig
    from tether.prompts import get_prompt
    from tether.runner import CallableAgent, CommandAgent, load_tasks
    from tether.store import Reward, Rollout, RolloutStatus, Span, Store, Task, open_store
    from tether.tracing import emit_reward, span, traced
    from tether.trainer.loop import Trainer, TrainerConfig

__version__ = "0.1.0"

_LAZY = {
    "get_prompt": "tether.prompts",
    "CallableAgent": "tether.runner",
    "CommandAgent": "tether.runner",
    "load_tasks": "tether.runner",
    "Reward": "tether.store",
    "Rollout": "tether.store",
    "RolloutStatus": "tether.store",
    "Span": "tether.store",
    "Store": "tether.store",
    "Task": "tether.store",
    "open_store": "tether.store",
    "emit_reward": "tether.tracing",
    "span": "tether.tracing",
    "traced": "tether.tracing",
    "train": "tether.experiment.train",
    "SettingsError": "tether.experiment.errors",
    "Secrets": "tether.experiment.secrets",
    "TrainSettings": "tether.config",
    "Trainer": "tether.trainer.loop",
    "TrainerConfig": "tether.trainer.loop",
    "TrainConfig": "tether.learner.config",
}

__all__ = [
    "CallableAgent",
    "CommandAgent",
    "Reward",
    "Rollout",
    "RolloutStatus",
    "Secrets",
    "SettingsError",
    "Span",
    "Store",
    "Task",
    "TrainConfig",
    "TrainSettings",
    "Trainer",
    "TrainerConfig",
    "__version__",
    "emit_reward",
    "get_prompt",
    "load_tasks",
    "open_store",
    "span",
    "traced",
    "train",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tether' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
