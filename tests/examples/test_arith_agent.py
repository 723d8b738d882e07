"""The demo's task files (examples/arith_agent/tasks.py, as scripts/demo.sh runs it): its held-out problems
share no (operation, numbers) with its training problems, read back from the question text."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.examples.support import ROOT, Example, script_task_files

ARITH = Example("arith_agent")
PROBLEM = re.compile(
    r"^(\w+) has (\d+) (\w+) and (gets|gives away) (\d+)(?: more)?\. How many \3 does \1 have now\?$"
)


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def combination(task: dict) -> tuple[str, int, int]:
    """(operation, numbers) of a problem, parsed from its text (the sum's numbers in either order are the
    same problem); checks the gold answer on the way."""
    match = PROBLEM.match(task["question"])
    assert match, task
    first, verb, second = int(match[2]), match[4], int(match[5])
    answer = task["reference"]["answer"]  # the evaluator's only: no other field carries it
    assert set(task) == {"id", "question", "reference"}, task
    if verb == "gets":
        assert answer == first + second, task
        return ("add", min(first, second), max(first, second))
    assert answer == first - second > 0, task
    return ("sub", first, second)


def test_the_demos_held_out_problems_share_no_operation_and_numbers_with_training(tmp_path: Path) -> None:
    train_file, val_file = script_task_files(ROOT / "scripts" / "demo.sh", tmp_path / "data")
    train, val = read(train_file), read(val_file)
    assert (len(train), len(val)) == (200, 32)
    trained = {combination(task) for task in train}
    held_out = Counter(combination(task) for task in val)
    assert trained.isdisjoint(held_out), sorted(trained & set(held_out))
    assert {operation for operation, _, _ in held_out} == {"add", "sub"}
    assert len(held_out) >= 10  # many combinations held out, not a few repeated
    assert {t["question"] for t in train}.isdisjoint(t["question"] for t in val)
    assert {t["id"] for t in train}.isdisjoint(t["id"] for t in val)
    subtractions = sum(combination(task)[0] == "sub" for task in train)
    assert 0.4 <= subtractions / len(train) <= 0.6  # the demo trains on a balanced mix (--balanced-train)


@pytest.mark.parametrize("seed", [1, 7])
def test_every_seed_splits_the_combinations_and_reproduces_its_files(seed: int, tmp_path: Path) -> None:
    def write(out: Path) -> tuple[list[dict], list[dict]]:
        command = [sys.executable, str(ARITH.dir / "tasks.py"), "--out-dir", str(out), "--seed", str(seed)]
        command += ["--train", "300", "--val", "60"]
        subprocess.run(command, check=True, capture_output=True, timeout=60)
        return read(out / "train.jsonl"), read(out / "val.jsonl")

    train, val = write(tmp_path / "a")
    assert (train, val) == write(tmp_path / "b")
    assert {combination(t) for t in train}.isdisjoint(combination(t) for t in val)
    tasks = ARITH.load("tasks")
    every = {key for keys in tasks.all_keys().values() for key in keys}
    assert {combination(t) for t in train + val} <= every
    assert tasks.held_out_keys(seed) < every and tasks.held_out_keys(seed) != tasks.held_out_keys(seed + 1)


def test_a_balanced_training_mix_draws_each_operation_alike_and_keeps_the_val_file(tmp_path: Path) -> None:
    def write(out: Path, *extra: str) -> tuple[list[dict], list[dict]]:
        command = [sys.executable, str(ARITH.dir / "tasks.py"), "--out-dir", str(out), "--seed", "3"]
        command += ["--train", "300", "--val", "60", *extra]
        subprocess.run(command, check=True, capture_output=True, timeout=60)
        return read(out / "train.jsonl"), read(out / "val.jsonl")

    def share_of_subtractions(tasks: list[dict]) -> float:
        return sum(combination(task)[0] == "sub" for task in tasks) / len(tasks)

    natural_train, natural_val = write(tmp_path / "natural")
    balanced_train, balanced_val = write(tmp_path / "balanced", "--balanced-train")
    assert balanced_val == natural_val
    assert share_of_subtractions(natural_train) < 0.4  # two additions to one subtraction
    assert 0.4 <= share_of_subtractions(balanced_train) <= 0.6
    assert {combination(t) for t in balanced_train}.isdisjoint(combination(t) for t in balanced_val)
