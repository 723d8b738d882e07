"""JSONL round trips and the Hugging Face dataset export."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest

from tether.adapters import Transition, read_jsonl, to_hf_dataset, write_jsonl


def sample(index: int = 0, *, group_id: str | None = "g") -> Transition:
    return Transition(
        rollout_id=f"ro-{index}",
        task_id="task-1",
        group_id=group_id,
        attempt=1,
        call_index=index,
        agent="writer",
        policy_version=None,
        prompt_ids=[1, 2, 3],
        response_ids=[4, 5, 6],
        response_logprobs=[-0.123456789012345, 0.0, -2.5],
        loss_mask=[1, 0, 1],
        reward=0.5,
        step_reward=-0.25,
        span_ids=["a", "b"],
    )


def test_jsonl_round_trip_is_exact(tmp_path: Path) -> None:
    transitions = [sample(0), sample(1, group_id=None)]
    path = tmp_path / "out" / "transitions.jsonl"
    assert write_jsonl(transitions, path) == 2
    lines = path.read_bytes().splitlines()
    assert len(lines) == 2 and orjson.loads(lines[0])["response_ids"] == [4, 5, 6]
    assert read_jsonl(path) == transitions


def test_read_jsonl_names_the_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(orjson.dumps(sample().to_dict()) + b"\n\n" + b'{"rollout_id": "x"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:3"):
        read_jsonl(path)


def test_hf_dataset_has_one_row_per_transition(tmp_path: Path) -> None:
    transitions = [sample(0), sample(1, group_id=None)]
    dataset = to_hf_dataset(transitions)
    assert dataset.num_rows == 2
    assert Transition.from_dict(dataset[0]) == transitions[0]
    assert dataset[1]["group_id"] is None and dataset[1]["policy_version"] is None
    assert to_hf_dataset([]).num_rows == 0
    dataset.save_to_disk(str(tmp_path / "ds"))


def test_missing_datasets_is_a_clear_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ImportError, match=r"pip install datasets=="):
        to_hf_dataset([sample()])
