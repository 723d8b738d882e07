"""`tether train` runs are named from their command line: the same command again resumes the run from
its checkpoint instead of starting a new one, and --fresh starts over, keeping the old run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import orjson

from tether.cli.main import main
from tether.store import SQLiteStore

AGENTS = Path(__file__).parent / "agents"


def train_args(project: Path, steps: int) -> list[str]:
    tasks = project / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"t{i}", "q": f"q{i}", "sleep": 0}) + "\n" for i in range(4)))
    return [
        "train",
        "--agent",
        f"{sys.executable} {AGENTS / 'one_call_agent.py'}",
        "--tasks",
        str(tasks),
        "--reward",
        f"{AGENTS / 'reward.py'}:echoed",
        "--model",
        "tiny-random",
        "--group-size",
        "2",
        "--tasks-per-step",
        "1",
        "--steps",
        str(steps),
        "--val-every",
        "0",
        "--checkpoint-every",
        "1",
        "--project-dir",
        str(project),
    ]


def train_steps(run_dir: Path) -> list[int]:
    lines = (run_dir / "metrics.jsonl").read_bytes().splitlines()
    return [orjson.loads(line)["step"] for line in lines if orjson.loads(line)["kind"] == "train"]


def test_the_same_command_resumes_and_fresh_starts_over(tmp_path: Path) -> None:
    assert main(train_args(tmp_path, steps=1)) == 0
    (run_dir,) = (tmp_path / ".tether" / "runs").iterdir()
    assert train_steps(run_dir) == [1]

    assert main(train_args(tmp_path, steps=2)) == 0  # --steps is not part of the run's name
    assert [p.name for p in (tmp_path / ".tether" / "runs").iterdir()] == [run_dir.name]
    assert train_steps(run_dir) == [1, 2]
    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    assert store.list_runs() == [run_dir.name]
    assert len(store.list_rollouts(run=run_dir.name, limit=100)) == 4  # 2 steps x 1 task x 2 samples

    assert main([*train_args(tmp_path, steps=1), "--fresh"]) == 0
    assert sorted(p.name for p in (tmp_path / ".tether" / "runs").iterdir()) == [
        run_dir.name,
        f"{run_dir.name}~1",
    ]
    assert train_steps(run_dir) == [1]
    assert store.list_runs() == [f"{run_dir.name}~1", run_dir.name]
