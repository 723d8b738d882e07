"""Per-step metrics: appended to `metrics.jsonl` in the run folder, to TensorBoard when installed, and to
Weights & Biases when a project is given (`tether.trainer.wandb_sink`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

    from tether.trainer.wandb_sink import WandbSink


class MetricsLog:
    def __init__(self, run_dir: Path, wandb_project: str | None = None) -> None:
        self.path = run_dir / "metrics.jsonl"
        run_dir.mkdir(parents=True, exist_ok=True)
        self._tensorboard = _tensorboard_writer(run_dir / "tensorboard")
        self._wandb: WandbSink | None = None
        if wandb_project is not None:
            from tether.trainer.wandb_sink import WandbSink

            self._wandb = WandbSink(wandb_project, run_dir)

    def write(self, record: dict[str, Any]) -> None:
        clean = {k: v for k, v in record.items() if not (isinstance(v, float) and not math.isfinite(v))}
        with self.path.open("ab") as handle:
            handle.write(orjson.dumps(clean) + b"\n")
        if self._tensorboard is not None and "step" in record:
            for key, value in _scalars(clean).items():
                self._tensorboard.add_scalar(key.replace(".", "/"), value, record["step"])
            self._tensorboard.flush()
        if self._wandb is not None and "step" in record:
            self._wandb.scalars(record["step"], str(record.get("kind", "train")), _scalars(clean))

    def samples(self, step: int, rows: list[list[Any]]) -> None:
        """Sample rollouts of a validation (W&B only: a table of `wandb_sink.SAMPLE_COLUMNS`)."""
        if self._wandb is not None:
            self._wandb.samples(step, rows)

    def rewrite(self, records: list[dict[str, Any]]) -> None:
        """Make the log exactly these records (a resumed run drops what came after its checkpoint)."""
        self.path.write_bytes(b"".join(orjson.dumps(record) + b"\n" for record in records))

    def close(self) -> None:
        if self._tensorboard is not None:
            self._tensorboard.close()
        if self._wandb is not None:
            self._wandb.close()
            self._wandb = None


def _scalars(record: dict[str, Any]) -> dict[str, float]:
    return {
        key: value
        for key, value in record.items()
        if isinstance(value, int | float) and not isinstance(value, bool) and key != "step"
    }


def read_metrics(path: Path) -> list[dict[str, Any]]:
    if path.is_dir():
        path = path / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"no metrics at {path}")
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _tensorboard_writer(folder: Path) -> SummaryWriter | None:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # TensorBoard is optional; the JSONL log is always written
        return None
    return SummaryWriter(str(folder))
