"""Weights & Biases logging for a training run (`tether train --wandb PROJECT`), beside metrics.jsonl and
TensorBoard: the same scalars at the same steps, and a table of sample rollouts per validation.
`WANDB_MODE=offline` is honoured (wandb reads it): the run is then written under the run folder only."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def wandb_key(kind: str, key: str) -> str:
    """`train/reward_mean`, `train/train.loss`, `val/val_score`: the record's kind, then its key as in
    metrics.jsonl. Records of both kinds share steps (and keys such as `policy_version`), and a train
    record has both `rollouts` and the learner's `train.rollouts`, so nothing shorter is unique."""
    return f"{kind}/{key}"


SAMPLE_COLUMNS: list[str | int] = ["rollout", "task", "input", "output", "reward", "status"]


class WandbSink:
    def __init__(self, project: str, run_dir: Path) -> None:
        try:
            import wandb
        except ImportError:
            raise SystemExit(
                "--wandb needs the wandb package: pip install 'tether[wandb]' (or pip install wandb)"
            ) from None
        self._wandb = wandb
        self.run = wandb.init(
            project=project, name=run_dir.name, dir=str(run_dir), config={}, reinit="create_new"
        )

    def scalars(self, step: int, kind: str, values: dict[str, float]) -> None:
        self.run.log({wandb_key(kind, key): value for key, value in values.items()}, step=step)

    def samples(self, step: int, rows: list[list[Any]]) -> None:
        table = self._wandb.Table(columns=SAMPLE_COLUMNS, data=rows)
        self.run.log({"val/samples": table}, step=step)

    def close(self) -> None:
        self.run.finish()
