"""Node agents, on the official `openai` npm package and on the Vercel AI SDK, through `tether rollout`
(sandboxed and not) and `tether train`: configured only by their environment, every call recorded with
its token ids.
`scripts/ensure_node.sh` (run by `make test`) installs Node.js and the package."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tether.cli.main import main
from tether.contracts import CallAttr, is_call_span
from tether.store import RolloutStatus, SQLiteStore

pytestmark = pytest.mark.integration

NODE = Path(__file__).parent / "node"
AGENT = f"node {NODE / 'openai_agent.mjs'}"
AGENTS = {"openai": AGENT, "ai-sdk": f"node {NODE / 'ai_sdk_agent.mjs'}"}
if not (NODE / "node_modules" / "openai").is_dir() or shutil.which("node") is None:
    pytest.skip(
        "the Node agents' packages are not installed: bash scripts/ensure_node.sh", allow_module_level=True
    )


def tasks(project: Path, count: int) -> Path:
    path = project / "tasks.jsonl"
    path.write_text("".join(json.dumps({"id": f"t{i}", "q": f"Say {i}."}) + "\n" for i in range(count)))
    return path


def recorded(project: Path) -> list[tuple[RolloutStatus, dict, list[int]]]:
    store = SQLiteStore(project / ".tether" / "store.db")
    found = []
    for rollout in store.list_rollouts(limit=100):
        calls = [s for s in store.query_spans(rollout_id=rollout.id) if is_call_span(s.name)]
        token_ids = [t for call in calls for t in call.attributes[CallAttr.CHOICES][0]["token_ids"]]
        found.append((rollout.status, json.loads(rollout.output or "{}"), token_ids))
    return found


@pytest.mark.parametrize("sandbox", ["none", "bwrap"])
@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_a_node_agent_runs_and_is_recorded_token_exact(tmp_path: Path, agent: str, sandbox: str) -> None:
    command = ["rollout", "--agent", AGENTS[agent], "--tasks", str(tasks(tmp_path, 2)), "--sandbox", sandbox]
    shown = ["--sandbox-show", str(NODE)] if sandbox == "bwrap" else []  # its node_modules
    assert main([*command, *shown, "--model", "tiny-random", "--project-dir", str(tmp_path)]) == 0
    found = recorded(tmp_path)
    assert sorted(output["q"] for _, output, _ in found) == ["Say 0.", "Say 1."]
    assert all(status == RolloutStatus.succeeded and token_ids for status, _, token_ids in found)


def test_a_node_agent_trains(tmp_path: Path) -> None:
    command = ["train", "--agent", AGENT, "--tasks", str(tasks(tmp_path, 2)), "--model", "tiny-random"]
    more = ["--group-size", "2", "--tasks-per-step", "1", "--steps", "1", "--val-every", "0"]
    assert main([*command, *more, "--sandbox-show", str(NODE), "--project-dir", str(tmp_path)]) == 0
    (run_dir,) = (tmp_path / ".tether" / "runs").iterdir()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    (step,) = [r for r in records if r["kind"] == "train"]
    assert step["calls"] == 2 and step["rollouts_without_calls"] == 0


def test_a_failing_node_agent_is_reported_by_its_error_not_by_nodes_version_line(tmp_path: Path) -> None:
    command = ["rollout", "--agent", f"node {NODE / 'failing_agent.mjs'}", "--tasks", str(tasks(tmp_path, 1))]
    assert (
        main([*command, "--sandbox", "none", "--model", "tiny-random", "--project-dir", str(tmp_path)]) == 1
    )
    (rollout,) = SQLiteStore(tmp_path / ".tether" / "store.db").list_rollouts(limit=10)
    assert rollout.error == "agent exited with code 1: Error: no answer for Say 0."
