"""`tether rollout` starts Python agents warm by default: the same run as a cold one (`--agent-cold`),
through the CLI, a real gateway and a real agent on the `openai` client, every call recorded; only the
start differs (the agent says which). `--agent-warm`, once needed, is still accepted."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.fake_upstream import Behaviour, create_fake_upstream
from tests.helpers import serve_app
from tether.cli.main import main
from tether.store import RolloutStatus, SQLiteStore

AGENTS = Path(__file__).parent / "agents"


@pytest.fixture
def upstream() -> Iterator[str]:
    with serve_app(create_fake_upstream(Behaviour())) as url:
        yield url + "/v1"


def rollout(project: Path, upstream: str, *extra: str) -> list[tuple[str | None, int]]:
    """The final outputs and recorded calls of each rollout of a 6-task run, by task."""
    tasks = project / "tasks.jsonl"
    project.mkdir()
    tasks.write_text("".join(json.dumps({"id": f"t{i}", "q": f"question {i}"}) + "\n" for i in range(6)))
    agent = f"{sys.executable} {AGENTS / 'openai_call_agent.py'}"
    args = ["rollout", "--agent", agent, "--tasks", str(tasks), "--upstream", upstream]
    args += ["--upstream-token-ids", "--n-workers", "3", "--project-dir", str(project)]
    assert main([*args, *extra]) == 0
    store = SQLiteStore(project / ".tether" / "store.db")
    try:
        rollouts = sorted(store.list_rollouts(limit=100), key=lambda r: r.task_id)
        assert all(r.status is RolloutStatus.succeeded for r in rollouts)
        return [(r.output, len(store.query_spans(rollout_id=r.id, limit=100))) for r in rollouts]
    finally:
        store.close()


def test_a_warm_run_by_default_records_what_a_cold_run_does(tmp_path: Path, upstream: str) -> None:
    cold = rollout(tmp_path / "cold", upstream, "--agent-cold")
    warm = rollout(tmp_path / "warm", upstream)
    assert cold == [(f"cold question {i}", 1) for i in range(6)]
    assert warm == [(f"warm question {i}", 1) for i in range(6)]
    assert zygotes() == []  # the command stopped its warm interpreters as it ended
    assert rollout(tmp_path / "flag", upstream, "--agent-warm") == warm  # an older command line


def zygotes() -> list[int]:
    """This process's children that are warm interpreters, running."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if int(stat[1]) == os.getpid() and stat[0] != "Z" and b"zygote.py" in cmdline:
            found.append(int(entry.name))
    return found


def test_agent_preload_with_agent_cold_is_refused(tmp_path: Path, upstream: str) -> None:
    with pytest.raises(SystemExit, match="--agent-preload needs warm starts: drop --agent-cold"):
        rollout(tmp_path / "p", upstream, "--agent-cold", "--agent-preload", "openai")


def test_agent_cold_with_agent_warm_is_refused(tmp_path: Path, upstream: str) -> None:
    with pytest.raises(SystemExit, match="--agent-cold and --agent-warm contradict each other"):
        rollout(tmp_path / "p", upstream, "--agent-cold", "--agent-warm")
