"""`tether train --val-reward NAME`: held-out rollouts are scored by a named reward kept beside the one
training uses (train on a judge, validate with the evaluator), and a name no held-out rollout has is a
clear error, not a score of 0."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.cli.test_train_runs import train_args
from tether.cli.main import main
from tether.store import SQLiteStore
from tether.store.reward_rule import rollout_reward

ANSWERED = "def answered(task, output):\n    return 0.0 if output is None else 1.0\n"


def val_args(tmp_path: Path, val_reward: str) -> list[str]:
    args = train_args(tmp_path, steps=1)
    (tmp_path / "answered.py").write_text(ANSWERED)
    args += ["--val-tasks", str(tmp_path / "tasks.jsonl"), "--reward", f"{tmp_path / 'answered.py'}:answered"]
    return [*args, "--reward-weights", "echoed=0", "--val-reward", val_reward]


def test_held_out_rollouts_are_scored_by_the_named_reward(tmp_path: Path) -> None:
    assert main(val_args(tmp_path, "answered")) == 0
    (run_dir,) = (tmp_path / ".tether" / "runs").iterdir()
    lines = [orjson.loads(line) for line in (run_dir / "metrics.jsonl").read_bytes().splitlines()]
    validations = [line for line in lines if line["kind"] == "val"]
    assert validations and all(v["val_score"] == 1.0 for v in validations)
    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    held_out = [r for r in store.list_rollouts(limit=1000) if r.mode == "val"]
    # Their reward, what training uses, is the weighted sum: 0 whatever the agent wrote.
    assert held_out and all(rollout_reward(store, r) == 0.0 for r in held_out)


def test_a_val_reward_no_held_out_rollout_has_is_refused_naming_those_they_have(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"--val-reward correct: .*\['answered', 'echoed', 'reward'\]"):
        main(val_args(tmp_path, "correct"))


def test_a_val_reward_without_held_out_tasks_or_a_reward_source_is_refused(tmp_path: Path) -> None:
    args = [*train_args(tmp_path, steps=1), "--val-reward", "answered"]
    with pytest.raises(SystemExit, match="give --val-tasks"):
        main(args)
    reward = args.index("--reward")
    no_reward = args[:reward] + args[reward + 2 :] + ["--val-tasks", str(tmp_path / "tasks.jsonl")]
    with pytest.raises(SystemExit, match="--reward source records"):
        main(no_reward)
