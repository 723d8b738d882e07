"""`--reward` given several sources through `tether rollout`: a Python evaluator and an LLM judge
(a real server on loopback) combined by weights, each reward stored by name, the judge's call stored as
its own span and never as a model call; a judge that fails fails that rollout's reward, quoted."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.gateway.fake_upstream import Behaviour, create_fake_upstream
from tests.helpers import serve_app
from tests.rewards.test_judge import judge_server
from tether.cli.main import main
from tether.config.commands import RolloutSettings
from tether.contracts import JUDGE_SPAN, Origin, is_call_span
from tether.experiment.sandbox import hidden_paths
from tether.rewards import RewardOptions, combine, parse_weights, reward_source
from tether.runner.rewards import RewardError
from tether.runner.sandbox_view import under
from tether.store import RolloutStatus, SQLiteStore

AGENT = Path(__file__).parents[1] / "cli" / "agents" / "openai_call_agent.py"
EVALUATOR = "def answered(task, output):\n    return 1.0 if output else 0.0\n"


def project_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"t{i}", "q": f"question {i}"}) + "\n" for i in range(2)))
    (tmp_path / "answered.py").write_text(EVALUATOR)
    (tmp_path / "rubric.md").write_text("Score 1 when the agent answered the question.")
    return tasks, tmp_path / "answered.py", tmp_path / "rubric.md"


def rollout(tmp_path: Path, judge_url: str, *extra: str) -> SQLiteStore:
    tasks, evaluator, rubric = project_files(tmp_path)
    with serve_app(create_fake_upstream(Behaviour())) as upstream:
        args = ["rollout", "--agent", f"{sys.executable} {AGENT}", "--tasks", str(tasks)]
        args += ["--upstream", f"{upstream}/v1", "--upstream-token-ids", "--project-dir", str(tmp_path)]
        args += ["--reward", f"{evaluator}:answered", "--reward", f"judge:{rubric}", "--judge-url", judge_url]
        main([*args, "--reward-retries", "1", *extra])
    return SQLiteStore(tmp_path / ".tether" / "store.db")


def test_a_weighted_sum_of_an_evaluator_and_a_judge_is_the_reward(tmp_path: Path) -> None:
    with judge_server(lambda _: "It answered.\nSCORE: 0.5") as (url, seen):
        store = rollout(tmp_path, url, "--reward-weights", "answered=0.5,judge=0.5")
    rollouts = store.list_rollouts(limit=10)
    assert len(rollouts) == 2 and len(seen) == 2
    for done in rollouts:
        assert done.status is RolloutStatus.succeeded, done.error
        rewards = {r.name: (r.value, r.primary) for r in store.query_rewards(done.id)}
        assert rewards == {"answered": (1.0, False), "judge": (0.5, False), "reward": (0.75, True)}
        spans = store.query_spans(rollout_id=done.id, limit=100)
        assert [s.name for s in spans if is_call_span(s.name)] == ["llm.chat"]  # the agent's call only
        (judged,) = [s for s in spans if s.name == JUDGE_SPAN]
        assert judged.origin == Origin.JUDGE and judged.attributes["score"] == 0.5
        assert (
            done.output is not None and done.output in judged.attributes["request"]["messages"][1]["content"]
        )


def test_a_judge_that_never_answers_in_format_fails_the_rollouts_reward_quoting_it(tmp_path: Path) -> None:
    with judge_server(lambda _: "Looks good!") as (url, _):
        store = rollout(tmp_path, url)
    for done in store.list_rollouts(limit=10):
        assert done.status is RolloutStatus.failed
        assert done.error is not None and "judge gave no score" in done.error and "Looks good!" in done.error
        assert store.query_rewards(done.id) == []  # no silent 0
        spans = store.query_spans(rollout_id=done.id, limit=100)
        assert [s.status for s in spans if s.name == JUDGE_SPAN] == ["error", "error"]  # kept


def test_bad_reward_options_are_refused_before_anything_runs(tmp_path: Path) -> None:
    _, evaluator, rubric = project_files(tmp_path)
    with pytest.raises(RewardError, match="needs --judge-url"):
        reward_source(f"judge:{rubric}")
    with pytest.raises(RewardError, match="no rubric file"):
        reward_source(f"judge:{tmp_path / 'missing.md'}", RewardOptions(judge_url="http://127.0.0.1:9/v1"))
    with pytest.raises(RewardError, match="expected NAME=NUMBER"):
        parse_weights("answered=high")
    both = combine([reward_source(f"{evaluator}:answered")] * 2, None)
    with pytest.raises(RewardError, match="both give \\['answered'\\]"):
        both({}, "x", [])
    missing = combine([reward_source(f"{evaluator}:answered")], parse_weights("judge=1"))
    with pytest.raises(RewardError, match="names \\['judge'\\], not among"):
        missing({}, "x", [])


def test_a_sandboxed_agent_gets_neither_the_evaluators_file_nor_the_rubric(tmp_path: Path) -> None:
    tasks, evaluator, rubric = project_files(tmp_path)
    options = RewardOptions(judge_url="http://127.0.0.1:9/v1")
    sources = combine(
        [reward_source(f"{evaluator}:answered"), reward_source(f"judge:{rubric}", options)], None
    )
    settings = RolloutSettings()
    settings.agent.command, settings.tasks.file = f"{sys.executable} {AGENT}", str(tasks)
    settings.store.project_dir = str(tmp_path / "p")
    hidden = hidden_paths(settings, sources)
    # each hidden with its folder (its data files too): the agent's code lives elsewhere
    assert under(str(evaluator.resolve()), hidden) and under(str(rubric.resolve()), hidden)
