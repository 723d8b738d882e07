"""Demonstrations: an unmodified agent driven by a scripted teacher through `tether rollout --upstream`,
its calls marked as demonstrations in the store, tokenized with the policy's chat template, imitated by
`tether train --from-run`, and never let into an RL batch."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import serve_app
from tether.adapters import build_transitions
from tether.adapters.demonstrations import NoDemonstrations
from tether.algorithms import DemonstrationInRLBatch, Sample, assign_advantages, imitation_batch
from tether.contracts import Meta
from tether.models.catalog import TINY_RANDOM, resolve_model
from tether.models.chat_template import ChatTemplate
from tether.models.tools import parse_tool_calls
from tether.project import Project
from tether.store import RolloutStatus, SQLiteStore
from tether.teacher import NoReference, Reply, ToolCall, first_user_text, teacher_app, tool_results
from tether.trainer.imitation import build_demonstrations, demonstration_rollouts

ROOT = Path(__file__).resolve().parents[2]
# A plain openai-client agent with one tool, `add`, that it runs itself.
AGENT = """
import json, os
from openai import OpenAI
task = json.loads(os.environ["TETHER_TASK"])
client = OpenAI(max_retries=0)
tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object",
         "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}]
messages = [{"role": "system", "content": "Add with the tool."},
            {"role": "user", "content": task["question"]}]
for _ in range(3):
    reply = client.chat.completions.create(model="policy", messages=messages, tools=tools, max_tokens=48)
    message = reply.choices[0].message
    if not message.tool_calls:
        break
    messages.append({"role": "assistant", "content": message.content, "tool_calls": [
        {"id": c.id, "type": "function",
         "function": {"name": c.function.name, "arguments": c.function.arguments}}
        for c in message.tool_calls]})
    for call in message.tool_calls:
        args = json.loads(call.function.arguments)
        messages.append({"role": "tool", "tool_call_id": call.id, "content": str(args["a"] + args["b"])})
print(message.content or "")
"""
REWARD = """
def correct(task, output):
    return float((output or "").strip() == f"Answer: {task['answer']}")
"""
TRAIN = [
    {"id": f"t{a}", "question": f"What is {a} plus {a + 1}?", "a": a, "answer": 2 * a + 1} for a in (2, 5, 7)
]
VAL = [{"id": "v1", "question": "What is 3 plus 4?", "a": 3, "answer": 7}]


def teacher(request: dict[str, Any]) -> Reply:
    task = next((t for t in TRAIN if t["question"] == first_user_text(request)), None)
    if task is None:
        raise NoReference("no reference for this question")
    if not tool_results(request):
        return Reply(tool_calls=[ToolCall("add", {"a": task["a"], "b": task["a"] + 1})])
    return Reply(content=f"Answer: {task['answer']}")


@pytest.fixture(scope="module")
def teacher_url() -> Iterator[str]:
    with serve_app(teacher_app(teacher)) as url:
        yield f"{url}/v1"


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return resolve_model(TINY_RANDOM, tmp_path_factory.mktemp("models"))


def tether(*args: str, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tether.cli.main", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def write_tasks(path: Path, tasks: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(task) + "\n" for task in tasks))
    return path


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, teacher_url: str) -> Path:
    """A project with run `teach`: the teacher's rollouts of the train tasks and of one it does not know."""
    folder = tmp_path_factory.mktemp("project")
    (folder / "agent.py").write_text(AGENT)
    (folder / "reward.py").write_text(REWARD)
    write_tasks(folder / "train.jsonl", TRAIN)
    write_tasks(folder / "val.jsonl", VAL)
    write_tasks(folder / "teach.jsonl", [*TRAIN, {"id": "unknown", "question": "What is 1 plus 1?", "a": 1}])
    done = tether(*rollout_args(folder, "teach.jsonl", teacher_url), "--run", "teach")
    assert done.returncode == 0, done.stderr[-2000:]
    return folder


def rollout_args(folder: Path, tasks: str, url: str) -> list[str]:
    return [
        *("rollout", "--project-dir", str(folder), "--tasks", str(folder / tasks)),
        *(
            "--agent",
            f"{sys.executable} {folder / 'agent.py'}",
            "--reward",
            f"{folder / 'reward.py'}:correct",
        ),
        *("--upstream", url, "--upstream-model", "teacher", "--n-workers", "2", "--timeout", "60"),
    ]


def open_store(folder: Path) -> SQLiteStore:
    return SQLiteStore(Project.at(folder).store_path)


def test_teacher_rollouts_are_marked_demonstrations_and_never_on_policy_samples(project: Path) -> None:
    store = open_store(project)
    try:
        rollouts = store.list_rollouts(run="teach", limit=100)
        assert len(rollouts) == 4 and all(r.metadata.get(Meta.DEMONSTRATION) for r in rollouts)
        report = build_transitions(store, rollouts, merge=True)
        assert report.transitions == []
        assert report.skipped["demonstration"] == report.calls > 0
    finally:
        store.close()


def test_a_task_the_teacher_does_not_know_fails_and_is_no_demonstration(project: Path) -> None:
    store = open_store(project)
    try:
        by_task = {r.task_id: r for r in store.list_rollouts(run="teach", limit=100)}
        assert by_task["unknown"].status == RolloutStatus.failed
        assert (
            "no reference for this question"
            in store.query_spans(rollout_id=by_task["unknown"].id)[0].attributes["error"]["message"]
        )
        chosen = demonstration_rollouts(store, "teach")
        assert sorted(r.task_id for r in chosen) == ["t2", "t5", "t7"]
    finally:
        store.close()


def test_demonstrations_are_the_policy_template_s_tokens_for_the_teacher_s_answers(
    project: Path, tiny_engine: Any
) -> None:
    store = open_store(project)
    template = ChatTemplate(tiny_engine.tokenizer)
    try:
        rollouts = demonstration_rollouts(store, "teach")
        report = build_demonstrations(store, rollouts, template, merge=True)
        first_call = store.query_spans(rollout_id=rollouts[0].id)[0].attributes["request"]
    finally:
        store.close()
    assert len(report.transitions) == 3  # the tool call and the answer merge: one sequence each
    transition = next(t for t in report.transitions if t.rollout_id == rollouts[0].id)
    assert transition.demonstration and transition.policy_version is None
    # The prompt is what the built-in engine gives the policy for the same messages.
    assert transition.prompt_ids == tiny_engine.chat_prompt_ids(first_call["messages"], first_call["tools"])
    trained = [t for t, m in zip(transition.response_ids, transition.loss_mask, strict=True) if m]
    masked = [t for t, m in zip(transition.response_ids, transition.loss_mask, strict=True) if not m]
    task = next(t for t in TRAIN if t["id"] == rollouts[0].task_id)
    text = tiny_engine.decode(trained)
    first_turn = tiny_engine.decode(transition.response_ids[: transition.loss_mask.index(0)])
    parsed = parse_tool_calls(first_turn.replace("<|im_end|>", ""), {"add"})
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [
        ("add", {"a": task["a"], "b": task["a"] + 1})
    ]
    assert text.endswith(f"Answer: {task['answer']}") and trained[-1] == template.eos_token_id
    assert f"<tool_response>\n{task['answer']}\n</tool_response>" in tiny_engine.decode(masked)


def test_an_rl_batch_refuses_demonstrations(project: Path, tiny_engine: Any, tiny_path: Path) -> None:
    from tether.learner.config import TrainConfig
    from tether.learner.policy import PolicyTrainer

    store = open_store(project)
    try:
        report = build_demonstrations(
            store, demonstration_rollouts(store, "teach"), ChatTemplate(tiny_engine.tokenizer)
        )
    finally:
        store.close()
    with pytest.raises(DemonstrationInRLBatch, match="RL trains only on tokens the policy generated"):
        assign_advantages(report.transitions, method="grpo")
    trainer = PolicyTrainer(TrainConfig(model=str(tiny_path), lr=1e-2))
    mixed = [Sample(t, advantage=0.5) for t in report.transitions]
    with pytest.raises(DemonstrationInRLBatch):
        trainer.step(mixed)
    # Imitated, they are learned: the demonstrations' negative log-likelihood falls.
    nll = [trainer.step(imitation_batch(report.transitions)).nll for _ in range(4)]
    assert nll[-1] < nll[0]


def test_train_from_run_imitates_the_demonstrations(project: Path, tiny_path: Path) -> None:
    done = tether(
        *train_args(project, tiny_path),
        *(
            "--algorithm",
            "sft",
            "--from-run",
            "teach",
            "--steps",
            "3",
            "--sft-batch",
            "3",  # every step imitates all three demonstrations: its NLL is on the same tokens
            "--lr",
            "1e-2",
            "--run",
            "imitate",
        ),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = (Project.at(project).state_dir / "runs" / "imitate" / "metrics.jsonl").read_text().splitlines()
    updates = [r for r in map(json.loads, lines) if r["kind"] == "train"]
    assert [r["phase"] for r in updates] == ["sft"] * 3
    assert all(r["samples"] == 3 for r in updates)
    nll = [r["train.nll"] for r in updates]  # each measured before its step's update
    assert nll[0] > nll[1] > nll[2] > 0, nll


def train_args(folder: Path, model: Path) -> list[str]:
    return [
        *("train", "--project-dir", str(folder), "--tasks", str(folder / "train.jsonl")),
        *("--val-tasks", str(folder / "val.jsonl"), "--model", str(model)),
        *(
            "--agent",
            f"{sys.executable} {folder / 'agent.py'}",
            "--reward",
            f"{folder / 'reward.py'}:correct",
        ),
        *("--val-every", "0", "--timeout", "60"),
    ]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--algorithm", "sft", "--from-run", "nothing-here"], "run 'nothing-here' has no rollouts"),
        (["--algorithm", "grpo", "--from-run", "teach"], "give --sft-steps N"),
        (["--algorithm", "grpo", "--sft-steps", "3"], "name their run with --from-run"),
    ],
)
def test_train_from_run_refuses_bad_input_in_one_line(
    project: Path, tiny_path: Path, extra: list[str], message: str
) -> None:
    done = tether(*train_args(project, tiny_path), *extra)
    assert done.returncode != 0
    assert message in done.stderr and "Traceback" not in done.stderr


def test_train_from_a_run_without_successful_rollouts_is_a_clear_error(
    project: Path, tiny_path: Path, teacher_url: str
) -> None:
    write_tasks(project / "strangers.jsonl", [{"id": "s1", "question": "What is 9 plus 9?", "a": 9}])
    tether(*rollout_args(project, "strangers.jsonl", teacher_url), "--run", "strangers")
    done = tether(*train_args(project, tiny_path), "--algorithm", "sft", "--from-run", "strangers")
    assert done.returncode != 0
    assert "run 'strangers' has no successful rollouts to learn from" in done.stderr


def test_demonstrations_of_held_out_tasks_are_refused(project: Path, teacher_url: str) -> None:
    store = open_store(project)
    try:
        with pytest.raises(NoDemonstrations, match="held-out task"):
            demonstration_rollouts(store, "teach", held_out={"t5"})
    finally:
        store.close()
