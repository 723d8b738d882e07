"""Runs for the dashboard: every run in the store (and every run folder), with its status counts and
the tail of its `metrics.jsonl`, read from a byte offset so a live curve costs only its new lines."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tether.runner.runs import load_run
from tether.store.base import Store
from tether.store.records import RolloutQuery, RolloutStatus

LIVE_WINDOW_S = 30.0  # a run whose metrics changed this recently is shown as live
MAX_CHUNK_BYTES = 4 << 20  # the most metrics one poll returns; the next poll gets the rest
EVERY_ROLLOUT = 10**9


@dataclass(frozen=True)
class MetricsChunk:
    records: list[dict[str, Any]]
    offset: int  # where the next read starts: after the last complete line


def metrics_path(runs_dir: Path | None, run: str) -> Path | None:
    if runs_dir is None or "/" in run or run in (".", ".."):
        return None
    return runs_dir / run / "metrics.jsonl"


def read_metrics_from(path: Path | None, offset: int) -> MetricsChunk:
    """The complete lines of `path` after byte `offset` (a line still being written waits for the next
    read). A file shorter than `offset` was rewritten (a resumed run): it is read again from the start."""
    if path is None or not path.is_file():
        return MetricsChunk([], 0)
    with path.open("rb") as handle:
        offset = 0 if offset > handle.seek(0, 2) else offset
        handle.seek(offset)
        data = handle.read(MAX_CHUNK_BYTES)
    end = data.rfind(b"\n") + 1
    records = [orjson.loads(line) for line in data[:end].splitlines() if line.strip()]
    return MetricsChunk(records, offset + end)


def run_summaries(store: Store, runs_dir: Path | None) -> list[dict[str, Any]]:
    names = list(store.list_runs())
    if runs_dir is not None and runs_dir.is_dir():
        folders = sorted(p.name for p in runs_dir.iterdir() if (p / "metrics.jsonl").is_file())
        names += [name for name in folders if name not in names]
    return [_summary(store, runs_dir, name) for name in names]


def _summary(store: Store, runs_dir: Path | None, name: str) -> dict[str, Any]:
    counts = {
        status.value: store.query_rollouts(
            RolloutQuery(run=name, status=status, limit=0, count_cap=EVERY_ROLLOUT)
        ).total
        for status in RolloutStatus
    }
    record = load_run(store, name)
    path = metrics_path(runs_dir, name)
    last = {str(line.get("kind")): line for line in read_metrics_from(path, 0).records}  # of each kind
    modified = path.stat().st_mtime if path is not None and path.is_file() else None
    active = counts["queued"] + counts["running"] > 0
    recent = modified is not None and time.time() - modified < LIVE_WINDOW_S
    return {
        "name": name,
        "command": record.command if record else ("train" if last else None),
        "settings": record.settings if record else {},
        "starts": record.starts if record else None,
        "rollouts": counts,
        "total": sum(counts.values()),
        "steps": last.get("train", {}).get("step"),
        "reward": last.get("train", {}).get("reward_mean"),
        "val_score": last.get("val", {}).get("val_score"),
        "has_metrics": bool(last),
        "live": active or recent,
        "updated_at": modified,
    }
