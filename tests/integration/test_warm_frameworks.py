"""Every framework of these tests as an agent process under `tether rollout`, warm by default: forked from
a warm interpreter that had the framework loaded (each agent says whether it found it loaded), its one
call through the gateway recorded as a cold start's would be; unsandboxed, and in `--sandbox bwrap` (the
zygote in a sandbox of its own, each child confining itself). The agents are in tests/integration/agents/."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.fake_upstream import Behaviour, create_fake_upstream
from tests.helpers import serve_app
from tether.cli.main import main
from tether.store import RolloutStatus, SQLiteStore

pytestmark = pytest.mark.integration
HERE = Path(__file__).parent
AGENTS = {
    "openai": HERE.parents[0] / "cli" / "agents" / "openai_call_agent.py",
    "langgraph": HERE / "agents" / "langgraph_agent.py",
    "openai-agents": HERE / "agents" / "agents_sdk_agent.py",
    "autogen": HERE / "agents" / "autogen_agent.py",
    "anthropic": HERE / "agents" / "anthropic_agent.py",
    "mcp": HERE / "agents" / "mcp_warm_agent.py",  # the calc example's, starting its MCP server (stdio)
}
# what an agent reaches outside its own folder, shown to it in the sandbox (--sandbox-show)
SHOWN = {"mcp": HERE.parents[1] / "examples" / "calc_agent"}
TASKS = 3


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with serve_app(create_fake_upstream(Behaviour())) as url:
        yield url + "/v1"


@pytest.mark.parametrize("sandbox", ["none", "bwrap"])
@pytest.mark.parametrize("framework", sorted(AGENTS))
def test_the_framework_agent_runs_warm_and_every_call_is_recorded(
    framework: str, sandbox: str, tmp_path: Path, upstream: str
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"t{i}", "q": f"question {i}"}) + "\n" for i in range(TASKS)))
    args = ["rollout", "--agent", f"{sys.executable} {AGENTS[framework]}", "--tasks", str(tasks)]
    args += ["--upstream", upstream, "--upstream-token-ids", "--n-workers", "2"]
    args += ["--sandbox", sandbox]
    if sandbox == "bwrap" and framework in SHOWN:
        args += ["--sandbox-show", str(SHOWN[framework])]
    assert main([*args, "--project-dir", str(tmp_path), "--timeout", "120"]) == 0
    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    try:
        rollouts = sorted(store.list_rollouts(limit=100), key=lambda r: r.task_id)
        assert [r.status for r in rollouts] == [RolloutStatus.succeeded] * TASKS, [r.error for r in rollouts]
        # every agent found its framework already imported: forked warm, the first one too
        assert [(r.output or "").split()[:3] for r in rollouts] == [
            ["warm", "question", str(i)] for i in range(TASKS)
        ]
        for rollout in rollouts:
            (span,) = store.query_spans(rollout_id=rollout.id, limit=100)
            assert span.status == "ok" and span.attributes["choices"][0]["token_ids"]
            if framework == "mcp":  # the tool the warm agent's own MCP server child listed
                tools = span.attributes["request"]["tools"]
                assert [tool["function"]["name"] for tool in tools] == ["calculator"]
    finally:
        store.close()
