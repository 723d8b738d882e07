"""Write transitions out: JSON lines (one transition per line) or a Hugging Face `datasets.Dataset`."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from tether.adapters.transitions import Transition

DATASETS_PIN = "datasets==5.2.0"


def write_jsonl(transitions: Iterable[Transition], path: str | Path) -> int:
    """Write one JSON object per transition and line; returns how many were written."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with target.open("wb") as handle:
        for transition in transitions:
            handle.write(orjson.dumps(transition.to_dict()) + b"\n")
            count += 1
    return count


def read_jsonl(path: str | Path) -> list[Transition]:
    transitions = []
    with Path(path).open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                transitions.append(Transition.from_dict(orjson.loads(line)))
            except (orjson.JSONDecodeError, TypeError) as exc:
                raise ValueError(f"{path}:{number}: not a transition: {exc}") from exc
    return transitions


def _features() -> Any:
    from datasets import Features, List, Value

    ids = List(Value("int64"))
    return Features(
        {
            "rollout_id": Value("string"),
            "task_id": Value("string"),
            "group_id": Value("string"),
            "attempt": Value("int64"),
            "call_index": Value("int64"),
            "agent": Value("string"),
            "policy": Value("string"),
            "policy_version": Value("int64"),
            "prompt_ids": ids,
            "response_ids": ids,
            "response_logprobs": List(Value("float64")),
            "loss_mask": List(Value("int8")),
            "reward": Value("float64"),
            "step_reward": Value("float64"),
            "span_ids": List(Value("string")),
            "mode": Value("string"),
            "demonstration": Value("bool"),
        }
    )


def to_hf_dataset(transitions: Iterable[Transition]) -> Any:
    """A `datasets.Dataset` with one row per transition and the Transition fields as columns."""
    try:
        import datasets
    except ImportError as exc:
        raise ImportError(
            f"exporting transitions as a Hugging Face dataset needs `datasets`: pip install {DATASETS_PIN}"
        ) from exc
    features = _features()
    rows = [transition.to_dict() for transition in transitions]
    columns = {name: [row[name] for row in rows] for name in features}
    return datasets.Dataset.from_dict(columns, features=features)
