"""The calc_agent example: the safe calculator, the GSM8K task files, the numeric reward, and the real
AutoGen agent driven by `tether rollout` (the built-in engine with the tiny model, and a scripted upstream
that makes the tool call a tiny model never makes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.examples.support import Example, run_rollouts, script_task_files, scripted_upstream
from tests.integration.scripted_upstream import call_tool, say
from tether.runner.tasks import load_tasks

CALC = Example("calc_agent")
EXAMPLE = CALC.dir
AGENT = CALC.agent()
REWARD = CALC.reward("correct")
load = CALC.load


# --- the calculator -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "result"),
    [
        ("(16 - 3 - 4) * 2", "18"),
        ("80000 * 1.5", "120000"),
        ("2/2", "1"),
        ("7 / 2", "3.5"),
        ("7 // 2", "3"),
        ("7 % 4", "3"),
        ("2 ** 10", "1024"),
        ("-3 + +5", "2"),
        ("1,200 + 300", "1500"),
        ("1 / 3", "0.3333333333"),
        ("2 ** -2", "0.25"),
    ],
)
def test_calculator_evaluates_arithmetic(expression: str, result: str) -> None:
    assert load("calculator").calculator(expression) == result


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("__import__('os').system('echo hacked')", "unsupported syntax: Call"),
        ("open('/etc/passwd').read()", "unsupported syntax: Call"),
        ("x + 1", "unsupported syntax: Name"),
        ("(1).__class__", "unsupported syntax: Attribute"),
        ("[1][0]", "unsupported syntax: Subscript"),
        ("lambda: 1", "unsupported syntax: Lambda"),
        ("'a' * 3", "unsupported syntax: Constant"),
        ("True + 1", "unsupported syntax: Constant"),
        ("1 < 2", "unsupported syntax: Compare"),
        ("2 ** 1000", "exponent 1000 is too large"),
        ("9 ** 9 ** 9", "exponent 387420489 is too large"),
        ("10 ** 99 * 10 ** 99", "the result is too large"),
        ("(10 ** 50) ** 3", "the result is too large"),
        ("1 / 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("(-8) ** 0.5", "not a real number"),
        ("1 +", "cannot parse"),
        ("", "the expression is empty"),
        ("1+" * 300 + "1", "longer than 500 characters"),
    ],
)
def test_calculator_refuses_anything_but_bounded_arithmetic(expression: str, reason: str) -> None:
    calculator = load("calculator")
    with pytest.raises(calculator.CalculatorError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        calculator.evaluate(expression)
    assert calculator.calculator(expression).startswith("error: ")


def test_calculator_agrees_with_every_gsm8k_annotation() -> None:
    """The reference solutions' <<expression=result>> steps, over all of GSM8K, as a real-data check."""
    calculator, tasks = load("calculator"), load("tasks")
    steps = [
        step
        for split in ("train", "test")
        for task in tasks.load_split(split)
        for step in task["reference"]["calculations"]
    ]
    wrong = []
    for step in steps:
        expression, _, written = step.rpartition("=")
        try:
            value, expected = calculator.evaluate(expression), float(written.replace(",", ""))
        except (calculator.CalculatorError, ValueError):
            wrong.append(step)
            continue
        if abs(value - expected) > 0.01 * max(1.0, abs(expected)):
            wrong.append(step)
    assert len(steps) > 20_000
    assert len(wrong) <= len(steps) // 1000, wrong[:20]


# --- the task files -----------------------------------------------------------------------------------


def test_tasks_script_writes_reproducible_gsm8k_task_files(tmp_path: Path) -> None:
    def write(out: Path) -> None:
        command = [
            sys.executable,
            str(EXAMPLE / "tasks.py"),
            "--out-dir",
            str(out),
            "--train",
            "30",
            "--val",
            "10",
        ]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    write(tmp_path / "a")
    write(tmp_path / "b")
    assert (tmp_path / "a" / "train.jsonl").read_text() == (tmp_path / "b" / "train.jsonl").read_text()
    train, val = load_tasks(tmp_path / "a" / "train.jsonl"), load_tasks(tmp_path / "a" / "val.jsonl")
    assert len(train) == 30 and len(val) == 10
    assert all(t.id.startswith("gsm8k-train-") for t in train) and all(
        t.id.startswith("gsm8k-test-") for t in val
    )
    answers = [t.input["reference"]["answer"] for t in train + val]
    assert all(isinstance(answer, int | float) for answer in answers)
    assert all(set(t.input) == {"question", "reference"} and t.input["question"] for t in train + val)


def test_the_pipelines_held_out_problems_are_held_out_by_content(tmp_path: Path) -> None:
    """The split `pipeline.sh` writes: at least 100 held-out GSM8K test problems and 300 train ones, no
    question on both sides, and no train question a near-duplicate of a held-out one (the same words
    with other names and numbers)."""
    tasks = load("tasks")
    train_file, val_file = script_task_files(EXAMPLE / "pipeline.sh", tmp_path / "data")
    train, val = load_tasks(train_file), load_tasks(val_file)
    assert len(val) >= 100 and len(train) >= 300
    assert all(1 <= len(t.input["reference"]["calculations"]) <= 2 for t in train + val)
    assert {t.input["question"].lower() for t in train}.isdisjoint(t.input["question"].lower() for t in val)
    held = [tasks.words(t.input["question"]) for t in val]
    closest = max(tasks.overlap(tasks.words(t.input["question"]), other) for t in train for other in held)
    assert closest < tasks.NEAR_DUPLICATE


def test_near_duplicates_of_held_out_problems_are_left_out_of_train() -> None:
    tasks = load("tasks")
    held = [{"question": "A bus covers 150 km in 3 hours. At that pace, how many hours do 250 more km take?"}]
    pool = [
        {"question": "A bus covers 90 km in 3 hours. At that pace, how many hours do 60 more km take?"},
        {"question": "Ana has 5 apples and buys 3 more. How many apples does she have?"},
    ]
    assert tasks.overlap(tasks.words(pool[0]["question"]), tasks.words(held[0]["question"])) >= 0.7
    assert tasks.unlike(pool, held) == pool[1:]


def test_a_gsm8k_row_becomes_a_task_with_its_number_and_calculations() -> None:
    row = {
        "question": "Josh buys a house for $80,000 ...",
        "answer": "80,000+50,000=$<<80000+50000=130000>>130,000\nSo ... \n#### 70,000",
        "idx": 2,
    }
    assert load("tasks").to_task(row, "test") == {
        "id": "gsm8k-test-2",
        "question": "Josh buys a house for $80,000 ...",
        "reference": {"answer": 70000, "calculations": ["80000+50000=130000"]},
    }


# --- the reward ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "gold", "value"),
    [
        ("Answer: 18", 18, 1.0),
        ("She makes $18 every day.", 18, 1.0),
        ("Answer: $1,250.00", 1250, 1.0),
        ("Answer: 1,250", "1,250", 1.0),
        ("The total is 2.5 hours", 2.5, 1.0),
        ("2.50", 2.5, 1.0),
        ("Answer: -4", -4, 1.0),
        ("First 16 - 3 = 13, then 13 - 4 = 9. Answer: 18.", 18, 1.0),
        ("Answer: 18 eggs, from 16 eggs", 18, 0.0),
        ("Answer: 17", 18, 0.0),
        ("Answer: 1,8", 18, 0.0),
        ("Answer: 18.5", 18, 0.0),
        ("I cannot solve this", 18, 0.0),
        (None, 18, 0.0),
        ("", 18, 0.0),
    ],
)
def test_reward_matches_the_final_number(output: str | None, gold: object, value: float) -> None:
    assert load("reward").correct({"reference": {"answer": gold}}, output) == value


def test_the_agent_prints_its_answer_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))  # the script imports calculator.py from its own folder
    agent = load("agent")
    assert agent.final_line("9 * 2 = 18\nAnswer: 18\nGlad to help (1 more?)") == "Answer: 18"
    assert agent.final_line("It is\n18 dollars") == "It is 18 dollars"


# --- the real agent through `tether rollout` -----------------------------------------------------------


def test_rollouts_of_the_real_agent_on_the_built_in_engine(tmp_path: Path) -> None:
    tasks = load("tasks").load_split("test")[:2]
    for done in run_rollouts(tmp_path, AGENT, REWARD, tasks, "--model", "tiny-random", "--n-workers", "2"):
        assert done.reward_values["reward"] in (0.0, 1.0)
        done.assert_first_call_asks(["calculator"])


def test_the_calculator_runs_when_the_model_calls_it(tmp_path: Path) -> None:
    task = load("tasks").load_split("test")[0]  # Janet's ducks: 18
    turns = call_tool("calculator", expression="(16 - 3 - 4) * 2"), say("She makes $18 a day.\nAnswer: 18")
    with scripted_upstream(*turns) as upstream:
        [done] = run_rollouts(tmp_path, AGENT, REWARD, [task], *upstream.rollout_args, "--n-workers", "1")
    assert done.rollout.output == "Answer: 18"
    assert done.reward_values["reward"] == 1.0
    assert len(done.chat_calls) == 2
    tool_messages = [m for m in upstream.script.requests[1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["18"]
