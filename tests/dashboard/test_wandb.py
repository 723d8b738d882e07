"""`--wandb` with WANDB_MODE=offline: the offline run directory holds the scalars of metrics.jsonl and a
samples table per validation, read back with wandb's own reader of its `.wandb` files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.dashboard.conftest import TrainedProject
from tether.store.reward_rule import rollout_reward
from tether.trainer.metrics import read_metrics
from tether.trainer.wandb_sink import SAMPLE_COLUMNS, wandb_key

BLOCK = 32 * 1024  # the .wandb file is a LevelDB-style log: 32 KiB blocks of checksummed chunks
HEADER = 7  # ":W&B", magic, version; then each chunk: crc32 (4), length (2, little-endian), type (1)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def wandb_records(path: Path) -> Iterator[bytes]:
    """The records of a `.wandb` file (each a serialized `wandb_internal_pb2.Record`)."""
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    position, pending = HEADER, b""
    while position + HEADER <= len(data):
        left_in_block = BLOCK - position % BLOCK
        if left_in_block < HEADER:  # the block's tail is padding
            position += left_in_block
            continue
        length = int.from_bytes(data[position + 4 : position + 6], "little")
        kind = data[position + 6]
        chunk = data[position + HEADER : position + HEADER + length]
        position += HEADER + length
        if kind == FULL:
            yield chunk
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            yield pending + chunk
        else:
            return  # zero padding at the end of the file


def offline_history(run_dir: Path) -> list[dict[str, Any]]:
    from wandb.proto import wandb_internal_pb2

    (offline,) = (run_dir / "wandb").glob("offline-run-*")
    (run_file,) = offline.glob("*.wandb")
    rows = []
    for data in wandb_records(run_file):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        if record.WhichOneof("record_type") == "history":
            items = record.history.item
            rows.append(
                {item.key or "/".join(item.nested_key): orjson.loads(item.value_json) for item in items}
            )
    return rows


def test_offline_run_holds_the_logged_scalars(trained: TrainedProject) -> None:
    history = offline_history(trained.run_dir)
    by_step: dict[int, dict[str, Any]] = {}
    for row in history:
        by_step.setdefault(row["_step"], {}).update(row)
    for record in read_metrics(trained.run_dir):
        logged = by_step[record["step"]]
        for key, value in record.items():
            if isinstance(value, int | float) and not isinstance(value, bool) and key != "step":
                name = wandb_key(record["kind"], key)
                assert logged[name] == pytest.approx(value), name
    validations = [r for r in read_metrics(trained.run_dir) if r["kind"] == "val"]
    tables = [row for row in history if row.get("val/samples/_type") == "table-file"]
    assert len(tables) == len(validations)
    (offline,) = (trained.run_dir / "wandb").glob("offline-run-*")
    for row in tables:
        table = orjson.loads((offline / "files" / row["val/samples/path"]).read_bytes())
        assert table["columns"] == SAMPLE_COLUMNS and len(table["data"]) == row["val/samples/nrows"] == 2
        for rollout_id, *_, reward, status in table["data"]:
            assert rollout_reward(trained.store, trained.store.get_rollout(rollout_id)) == reward
            assert status == "succeeded"
