"""`tether eval`: a run's stored validations scored again. With the run's own evaluator it gives the
figures the run recorded; with another one, that one's (references read from the task file)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tether.cli.main import main

AGENTS = Path(__file__).parent / "agents"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of one step that validated before and after, greedily and with 2 samples per task."""
    project = tmp_path_factory.mktemp("eval")
    tasks = [{"id": f"t{i}", "q": f"q{i}", "sleep": 0, "reference": {"first": int(i == 0)}} for i in range(4)]
    (project / "val.jsonl").write_text("".join(json.dumps(task) + "\n" for task in tasks))
    (project / "train.jsonl").write_text("".join(json.dumps(task) + "\n" for task in tasks[:2]))
    command = [
        *("train", "--agent", f"{sys.executable} {AGENTS / 'one_call_agent.py'}"),
        *("--tasks", str(project / "train.jsonl"), "--val-tasks", str(project / "val.jsonl")),
        *("--reward", f"{AGENTS / 'reward.py'}:echoed", "--model", "tiny-random", "--group-size", "2"),
        *("--tasks-per-step", "1", "--steps", "1", "--val-every", "0", "--val-k", "2", "--run", "r"),
    ]
    assert main([*command, "--project-dir", str(project)]) == 0
    return project


def scored(project: Path, capsys: pytest.CaptureFixture[str], reward: str) -> list[dict]:
    capsys.readouterr()
    words = ["eval", "--run", "r", "--tasks", str(project / "val.jsonl"), "--reward", reward, "--json"]
    assert main([*words, "--project-dir", str(project)]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_with_the_runs_own_evaluator_eval_gives_what_the_run_recorded(
    trained: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = scored(trained, capsys, f"{AGENTS / 'reward.py'}:echoed")
    recorded = [
        json.loads(line) for line in (trained / ".tether/runs/r/metrics.jsonl").read_text().splitlines()
    ]
    validations = [r for r in recorded if r["kind"] == "val"]
    assert [row["step"] for row in rows] == [r["step"] for r in validations] == [0, 1]
    for row, record in zip(rows, validations, strict=True):
        for key in ("val_pass_at_1", "val_pass_at_1_ci", "val_k", "val_pass_at_k", "val_mean_at_k"):
            assert row[key] == record[key], key


def test_another_evaluator_reads_the_references_of_the_task_file(
    trained: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "first.py").write_text(
        "def first_only(task, output):\n    return float(task['reference']['first'])\n"
    )
    rows = scored(trained, capsys, f"{tmp_path / 'first.py'}:first_only")
    assert [(row["val_pass_at_1"], row["val_pass_at_k"], row["val_mean_at_k"]) for row in rows] == [
        (0.25, 0.25, 0.25),
        (0.25, 0.25, 0.25),
    ]


def test_what_eval_cannot_score_is_one_line_naming_the_fix(trained: Path, tmp_path: Path) -> None:
    words = ["eval", "--tasks", str(trained / "val.jsonl"), "--project-dir", str(trained)]
    reward = ["--reward", f"{AGENTS / 'reward.py'}:echoed"]
    with pytest.raises(SystemExit, match=r"^tether eval: give --reward MODULE:FUNCTION"):
        main([*words, "--run", "r"])
    with pytest.raises(SystemExit, match=r"^tether eval: run 'nope' has no held-out rollouts: train it with"):
        main([*words, *reward, "--run", "nope"])
    (tmp_path / "some.jsonl").write_text(json.dumps({"id": "t0", "q": "q0"}) + "\n")
    with pytest.raises(
        SystemExit, match=r"^tether eval: task 't1' of the run is not in --tasks: give its file$"
    ):
        main(
            [
                "eval",
                "--tasks",
                str(tmp_path / "some.jsonl"),
                *reward,
                "--run",
                "r",
                "--project-dir",
                str(trained),
            ]
        )
