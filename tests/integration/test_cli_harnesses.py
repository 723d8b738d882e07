"""Command-line coding harnesses as `tether rollout` agents, at the protocol level: Codex CLI (the
Responses API, streamed) and OpenCode (Chat Completions through the AI SDK), each pointed at the gateway
by its documented provider settings (tests/integration/agents/*_agent.sh), the model a scripted upstream
that first calls the harness's shell tool and then answers. Every call is accepted and recorded with
token ids, and the tool's output reaches the model. With the built-in model their prompts exceed its
context, and the harness shows the gateway's context-length error.
`scripts/ensure_node.sh` (run by `make test`) installs both from npm."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import serve_app
from tests.integration.scripted_upstream import Script, call_tool, create_scripted_upstream, say
from tether.cli.main import main
from tether.contracts import REFUSED_CALL_SPAN, CallAttr, is_call_span
from tether.store import RolloutStatus, SQLiteStore

pytestmark = pytest.mark.integration

AGENTS_DIR = Path(__file__).parent / "agents"
BIN = Path(__file__).parent / "harnesses" / "node_modules" / ".bin"
# Each harness's shell tool, and what it is called with.
SHELL = {
    "codex": ("exec_command", {"cmd": "echo tether-was-here"}),
    "opencode": ("bash", {"command": "echo tether-was-here", "description": "Print a word"}),
}
if shutil.which("node") is None or not all((BIN / name).exists() for name in ("codex", "opencode")):
    pytest.skip("the harnesses are not installed: bash scripts/ensure_node.sh", allow_module_level=True)


def task_file(project: Path) -> Path:
    path = project / "tasks.jsonl"
    path.write_text(json.dumps({"id": "t0", "prompt": "Print a word, then say done."}) + "\n")
    return path


def rollout(project: Path, harness: str, *model: str) -> int:
    agent = f"bash {AGENTS_DIR / f'{harness}_agent.sh'}"
    command = ["rollout", "--agent", agent, "--tasks", str(task_file(project)), "--sandbox", "none"]
    return main([*command, "--timeout", "300", *model, "--project-dir", str(project)])


@pytest.fixture
def upstream(request: pytest.FixtureRequest) -> Iterator[tuple[str, Script]]:
    name, arguments = SHELL[request.param]
    script = Script([call_tool(name, **arguments), say("Done.")])
    with serve_app(create_scripted_upstream(script)) as url:
        yield url + "/v1", script


@pytest.mark.parametrize("upstream", sorted(SHELL), indirect=True)
def test_a_harness_runs_its_tool_and_every_call_is_recorded(
    tmp_path: Path, upstream: tuple[str, Script], request: pytest.FixtureRequest
) -> None:
    harness = request.node.callspec.params["upstream"]
    url, script = upstream
    assert rollout(tmp_path, harness, "--upstream", url, "--upstream-token-ids") == 0
    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    (done,) = store.list_rollouts(limit=10)
    calls = [s for s in store.query_spans(rollout_id=done.id) if is_call_span(s.name)]
    store.close()
    assert done.status == RolloutStatus.succeeded and "Done." in (done.output or "")
    assert len(calls) == 2 and all(call.attributes[CallAttr.CHOICES][0]["token_ids"] for call in calls)
    assert [call.attributes.get(CallAttr.API) for call in calls] == [
        ("responses" if harness == "codex" else None)
    ] * 2
    # the harness ran the command and gave the model its output
    assert "tether-was-here" in json.dumps(script.requests[1]["messages"][-1])


def test_codex_with_the_built_in_model_shows_the_context_length_error(tmp_path: Path) -> None:
    assert rollout(tmp_path, "codex", "--model", "tiny-random") == 1
    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    (failed,) = store.list_rollouts(limit=10)
    spans = {span.name: span for span in store.query_spans(rollout_id=failed.id)}
    store.close()
    assert spans[REFUSED_CALL_SPAN].attributes[CallAttr.ERROR]["code"] == "context_length_exceeded"
    assert "ran out of room in the model's context window" in spans["agent.output"].attributes["stderr"]
