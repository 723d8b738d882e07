"""What names a run comes from the settings' own declarations (`option(..., run=...)`, `run_identity`):
the default names runs already have stay as they were, a setting declared to name the run changes the
name, one that is not leaves it, and a config file names the run as the same flags do."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.cli.main import parse_command_line
from tether.cli.options import settings_from_args
from tether.config.option import run_identity
from tether.runner.runs import default_run_name

BASE = ["--agent", "python agent.py", "--tasks", "/data/tasks.jsonl"]
OPTIMIZER = ["--optimizer-endpoint", "http://127.0.0.1:9/v1", "--out", "p.txt"]

# Names given by the hand-written lists these declarations replaced (computed with that code): a command
# line that named a run before names the same run now, so running it again still resumes it.
NAMES_RUNS_HAVE = {
    "train-tasks-d6b1addf": ["train", *BASE, "--reward", "r.py:f"],
    "train-tasks-f424d6eb": [
        "train",
        *BASE,
        *("--val-tasks", "/data/val.jsonl", "--reward", "a.py:f", "--reward", "b.py:g"),
        *("--reward-weights", "1,2", "--algorithm", "rloo", "--group-size", "4", "--tasks-per-step", "2"),
        *("--seed", "3", "--full", "--sft-steps", "5", "--from-run", "teacher"),
        *("--train-temperature", "0.7", "--train-top-p", "0.9", "--model", "tiny-random"),
        *("--primary-reward", "x", "--max-attempts", "3"),
    ],
    "train-tasks-3ae42566": [
        "train",
        *BASE,
        *("--policy", "b=lora:r8", "--policy", "a=lora:r4", "--model", "tiny-random"),
    ],
    "rollout-tasks-1a94cea2": ["rollout", *BASE, "--model", "tiny-random"],
    "rollout-tasks-86301d34": [
        "rollout",
        *BASE,
        *("--upstream", "http://127.0.0.1:9/v1", "--model", "m", "--reward", "r.py:f"),
        *("--primary-reward", "p", "--max-attempts", "2", "--group-size", "4", "--mode", "val"),
    ],
    "optimize-prompt-tasks-ec3f5be6": [
        "optimize-prompt",
        *BASE,
        *OPTIMIZER,
        *("--val-tasks", "/data/val.jsonl", "--reward", "r.py:f", "--model", "tiny-random"),
    ],
    "optimize-prompt-tasks-53af6a16": [
        "optimize-prompt",
        *BASE,
        *OPTIMIZER,
        *("--optimizer-model", "om", "--prompt-name", "sys", "--val-tasks", "/data/val.jsonl"),
        *("--reward", "r.py:f", "--model", "tiny-random", "--budget", "7", "--beam-width", "3"),
        *("--seed", "5", "--override", "marked", "--max-attempts", "2"),
    ],
}


def name_of(argv: list[str]) -> str:
    args = parse_command_line(argv)
    named, _ = run_identity(settings_from_args(args), args.command)
    return default_run_name(args.command, Path(args.tasks).stem, named)


@pytest.mark.parametrize("name", sorted(NAMES_RUNS_HAVE))
def test_a_command_line_names_the_run_it_named_before(name: str) -> None:
    assert name_of(NAMES_RUNS_HAVE[name]) == name


@pytest.mark.parametrize(
    ("command", "flag", "value", "names"),
    [
        ("train", "--algorithm", "rloo", True),
        ("train", "--lora-r", "8", True),
        ("train", "--train-temperature", "1.0", True),
        ("train", "--val-tasks", "/data/other.jsonl", True),
        ("train", "--max-attempts", "3", False),  # retries do not make another training run
        ("train", "--n-workers", "2", False),
        ("train", "--timeout", "30", False),
        ("train", "--lr", "1e-5", False),
        ("rollout", "--max-attempts", "3", True),
        ("rollout", "--mode", "val", True),
        ("rollout", "--upstream", "http://127.0.0.1:9/v1", True),
        ("rollout", "--n-workers", "2", False),
        ("optimize-prompt", "--budget", "9", True),
        ("optimize-prompt", "--optimizer-temperature", "0.3", False),
    ],
)
def test_a_declared_setting_names_the_run_and_another_does_not(
    command: str, flag: str, value: str, names: bool
) -> None:
    given = [
        command,
        *BASE,
        *(OPTIMIZER + ["--val-tasks", "/v.jsonl"] if command == "optimize-prompt" else []),
    ]
    assert (name_of([*given, flag, value]) != name_of(given)) is names


def test_the_shape_is_what_a_resumed_run_must_keep(tmp_path: Path) -> None:
    args = parse_command_line(["train", *BASE, "--train-top-p", "0.9", "--policy", "p=lora:r4"])
    named, shape = run_identity(settings_from_args(args), "train")
    assert shape["top_p"] == 0.9 and shape["policies"] == ["p=lora:r4"] and "temperature" not in shape
    assert named["tasks"] == "/data/tasks.jsonl" and "tasks" not in shape  # a task file is checked by task


def test_a_config_file_names_the_run_as_the_same_flags_do(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    config = tmp_path / "run.toml"
    config.write_text(
        f'[agent]\ncommand = "python agent.py"\n[tasks]\nfile = "{tasks}"\n'
        '[learner]\nalgorithm = "rloo"\n[sampling]\ngroup_size = 4\n'
    )
    from_file = name_of(["train", "--config", str(config)])
    from_flags = name_of(
        [
            "train",
            "--agent",
            "python agent.py",
            "--tasks",
            str(tasks),
            "--algorithm",
            "rloo",
            "--group-size",
            "4",
        ]
    )
    assert from_file == from_flags
    assert name_of(["train", "--config", str(config), "--group-size", "2"]) != from_file
