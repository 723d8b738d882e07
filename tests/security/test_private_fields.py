"""A task's `reference` is for its evaluator only. A hostile agent run through `tether rollout` looks for it
everywhere it can reach (environment, argv, the store and dashboard APIs with its token, the run record,
the files of its working and temporary directories) and finds nothing, so it scores 0; the same agent on
the same tasks with the answer as a plain field finds it and scores 1. The evaluator gets the whole task,
the operator's tokens read it back whole, and what would hand the reference to an agent (a placeholder
naming it, tasks whose reference no evaluator would read) is refused before anything runs."""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gateway.fake_upstream import Behaviour, create_fake_upstream
from tests.helpers import serve_app
from tests.rigs import GatewayRig
from tether.cli.main import main
from tether.runner import AgentEndpoints, CallableAgent, Runner, RunnerConfig
from tether.runner.agents import LLM
from tether.runner.runs import RunError, resource_name, start_run
from tether.store import RolloutRequest, RolloutStatus, SQLiteStore, Task

AGENTS = Path(__file__).parent / "agents"
SEEKER = f"{sys.executable} {AGENTS / 'reference_seeker.py'}"
REWARDS = AGENTS / "reference_reward.py"
RUN = "hostile"
QUESTION = "What is the code of {}?"


@pytest.fixture
def upstream() -> Iterator[str]:
    with serve_app(create_fake_upstream(Behaviour())) as url:
        yield url + "/v1"


@dataclass
class Finding:
    """What the hostile agent of one task found, what its answer was, and how it was scored."""

    answer: str
    found: dict[str, Any]
    rewards: dict[str, float]
    stored_input: dict[str, Any]

    @property
    def everything(self) -> str:
        return json.dumps(self.found)

    @property
    def own_rollout(self) -> str:
        return str(self.found["http"][f"/store/rollouts/{self.found['environ']['TETHER_ROLLOUT_ID']}"])


def write_tasks(tmp_path: Path, private: bool) -> tuple[Path, dict[str, str]]:
    """Two tasks whose answers nothing else holds: under `reference`, or as a plain field."""
    answers = {f"t{i}": f"ref-t{i}-{secrets.token_hex(8)}" for i in range(2)}
    (tmp_path / "found").mkdir()
    lines = []
    for task_id, answer in answers.items():
        task = {"id": task_id, "question": QUESTION.format(task_id), "run": RUN}
        task["out"] = str(tmp_path / "found" / f"{task_id}.json")
        task.update({"reference": {"answer": answer}} if private else {"answer": answer})
        lines.append(json.dumps(task))
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path, answers


def rollout_args(tmp_path: Path, tasks: Path, agent: str, upstream: str, *extra: str) -> list[str]:
    return [
        *("rollout", "--agent", agent, "--tasks", str(tasks), "--n-workers", "2"),
        *("--upstream", upstream, "--upstream-token-ids", "--project-dir", str(tmp_path / "project")),
        *("--run", RUN, "--sandbox", "none", *extra),  # unsandboxed: the reference is kept from it anyway
    ]


def run_hostile(
    tmp_path: Path, upstream: str, monkeypatch: pytest.MonkeyPatch, private: bool
) -> list[Finding]:
    tasks, answers = write_tasks(tmp_path, private)
    scratch = tmp_path / "tmp"  # the temporary directory of Tether and its agents: the agent reads it all
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    args = rollout_args(tmp_path, tasks, f"{SEEKER} {{question}}", upstream, "--reward", f"{REWARDS}:finds")
    assert main(args) == 0
    store = SQLiteStore(tmp_path / "project" / ".tether" / "store.db")
    try:
        rollouts = {r.task_id: r for r in store.list_rollouts(run=RUN, limit=10)}
        assert {r.status for r in rollouts.values()} == {RolloutStatus.succeeded}
        rewards = {t: {w.name: w.value for w in store.query_rewards(r.id)} for t, r in rollouts.items()}
    finally:
        store.close()
    return [
        Finding(
            answer,
            json.loads((tmp_path / "found" / f"{task_id}.json").read_text()),
            rewards[task_id],
            rollouts[task_id].input,
        )
        for task_id, answer in answers.items()
    ]


def test_a_hostile_agent_finds_no_reference_anywhere_and_scores_0(
    tmp_path: Path, upstream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for finding in run_hostile(tmp_path, upstream, monkeypatch, private=True):
        task = json.loads(finding.found["environ"]["TETHER_TASK"])
        assert set(task) == {"question", "run", "out"}  # its task, without the reference
        assert task["question"] in finding.found["argv"]
        assert json.loads(finding.own_rollout)["input"] == task  # the store API gave its rollout
        assert finding.found["http"][f"/store/resources/{resource_name(RUN)}"].startswith("403")
        assert all(r.startswith("401") for k, r in finding.found["http"].items() if k.startswith("/ui/api"))
        assert {Path(path).name for path in finding.found["files"]} == {"seen.txt"}  # only the agents' own
        assert finding.answer not in finding.everything
        assert finding.rewards == {"reward": 0.0, "whole_task": 1.0}  # the evaluator had the whole task
        assert finding.stored_input["reference"] == {"answer": finding.answer}  # and the store keeps it


def test_the_same_agent_finds_an_answer_kept_as_a_plain_field_and_scores_1(
    tmp_path: Path, upstream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for finding in run_hostile(tmp_path, upstream, monkeypatch, private=False):
        assert finding.answer in finding.found["environ"]["TETHER_TASK"]
        assert finding.answer in finding.own_rollout
        assert finding.rewards == {"reward": 1.0, "whole_task": 1.0}


# -- refused before anything runs ---------------------------------------------------------------------


def refusal(args: list[str]) -> str:
    with pytest.raises(SystemExit) as raised:
        main(args)
    return str(raised.value)


@pytest.mark.parametrize("placeholder", ["{reference}", "{reference[answer]}", "--a={reference.answer}"])
def test_a_placeholder_naming_the_reference_is_refused_at_start(tmp_path: Path, placeholder: str) -> None:
    tasks, _ = write_tasks(tmp_path, private=True)
    args = rollout_args(tmp_path, tasks, f"{SEEKER} {placeholder}", "http://127.0.0.1:9/v1")
    message = refusal([*args, "--reward", f"{REWARDS}:finds"])
    assert "uses {reference}" in message and "for the evaluator only" in message
    assert not (tmp_path / "project" / ".tether" / "store.db").exists()  # nothing ran


def test_tasks_with_a_reference_need_an_evaluator_that_takes_the_task(tmp_path: Path) -> None:
    tasks, _ = write_tasks(tmp_path, private=True)
    args = rollout_args(tmp_path, tasks, SEEKER, "http://127.0.0.1:9/v1")
    message = refusal([*args, "--reward", f"{REWARDS}:only_output"])
    assert "task 't0' has a 'reference'" in message and "only_output does not take the task" in message
    assert "no --reward" in refusal(args)
    assert not (tmp_path / "project" / ".tether" / "store.db").exists()


def test_train_refuses_held_out_tasks_whose_reference_no_evaluator_reads(tmp_path: Path) -> None:
    train = tmp_path / "train.jsonl"
    train.write_text(json.dumps({"id": "a", "question": "q"}) + "\n")
    val, _ = write_tasks(tmp_path, private=True)
    args = ["train", "--agent", SEEKER, "--tasks", str(train), "--val-tasks", str(val)]
    args += ["--reward", f"{REWARDS}:only_output", "--model", "tiny-random", "--project-dir", str(tmp_path)]
    assert "does not take the task" in refusal(args)


def test_a_reference_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "a", "question": "q", "reference": "42"}) + "\n")
    args = rollout_args(tmp_path, tasks, SEEKER, "http://127.0.0.1:9/v1", "--reward", f"{REWARDS}:finds")
    assert "tasks.jsonl:1: 'reference' must be a JSON object" in refusal(args)


def test_a_resumed_run_refuses_a_task_whose_reference_changed(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    try:
        task = Task(id="t", input={"question": "q", "reference": {"answer": "a"}})
        start_run(store, RUN, "rollout", [task])
        start_run(store, RUN, "rollout", [task])  # the same file resumes
        changed = Task(id="t", input={"question": "q", "reference": {"answer": "b"}})
        with pytest.raises(RunError, match=r"task 1 \('t'\) has changed"):
            start_run(store, RUN, "rollout", [changed])
    finally:
        store.close()


# -- the callable agent, and what each token reads back -------------------------------------------------


def test_a_callable_agent_gets_the_task_without_its_reference_and_the_evaluator_gets_it_whole(
    rig: GatewayRig,
) -> None:
    given: list[dict[str, Any]] = []
    scored: list[dict[str, Any]] = []

    def agent(task: dict[str, Any], llm: LLM) -> str:
        given.append(task)
        return "done"

    def evaluator(task: dict[str, Any], output: str | None) -> float:
        scored.append(task)
        return 1.0

    whole = {"question": "q", "reference": {"answer": "ref-secret"}}
    endpoints = AgentEndpoints(rig.url, rig.auth)
    runner = Runner(rig.store, CallableAgent(agent), endpoints, evaluator, RunnerConfig(n_workers=1))

    async def run() -> None:
        try:
            await runner.run([RolloutRequest(task=Task(id="t", input=whole))])
        finally:
            await runner.stop()

    asyncio.run(run())
    assert given == [{"question": "q"}] and scored == [whole]


def test_the_operator_reads_the_whole_task_and_a_rollout_token_reads_it_without_its_reference(
    rig: GatewayRig,
) -> None:
    whole = {"question": "q", "reference": {"answer": "ref-secret"}}
    rollout = rig.store.start_session(whole).rollout
    start_run(rig.store, RUN, "rollout", [Task(id="t", input=whole)])
    agent = rig.gateway.credentials(rollout.id)["api_key"]
    admin, viewer = rig.auth.admin_token, rig.auth.viewer_token

    def get(path: str, token: str) -> httpx.Response:
        return httpx.get(rig.url + path, headers={"Authorization": f"Bearer {token}"}, timeout=10)

    assert get(f"/store/rollouts/{rollout.id}", agent).json()["input"] == {"question": "q"}
    assert get(f"/store/rollouts/{rollout.id}", admin).json()["input"] == whole
    for token in (admin, viewer):
        assert get(f"/ui/api/rollouts/{rollout.id}", token).json()["rollout"]["input"] == whole
    assert get(f"/ui/api/rollouts/{rollout.id}", agent).status_code == 401
    # The run record holds a digest of every whole task: the operator's, never an agent's.
    record = f"/store/resources/{resource_name(RUN)}"
    assert get(record, admin).status_code == 200
    assert get(record, agent).status_code == 403
    assert resource_name(RUN) in {r["name"] for r in get("/store/resources", admin).json()}
    assert get("/store/resources", agent).json() == []
