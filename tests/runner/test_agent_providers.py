"""An agent whose SDK reads its provider from the environment is pointed at the gateway: the Anthropic SDK
by ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY (beside the OpenAI pair), and the operator's own provider keys
never reach it (with them it would call the provider past the gateway, unrecorded)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tether.cli.main import main
from tether.contracts import CallAttr, is_call_span
from tether.store import RolloutStatus, SQLiteStore

AGENT = Path(__file__).parents[1] / "cli" / "agents" / "anthropic_agent.py"


def test_an_anthropic_sdk_agent_reaches_the_gateway_and_not_the_provider(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-operators-own")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "https://provider.invalid")
    monkeypatch.setenv("GROQ_API_KEY", "gsk-operators-own")
    monkeypatch.setenv("GEMINI_API_KEY", "gemini-operators-own")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t0", "q": "hello"}) + "\n")
    command = ["rollout", "--agent", f"{sys.executable} {AGENT}", "--tasks", str(tasks)]
    assert main([*command, "--model", "tiny-random", "--project-dir", str(tmp_path)]) == 0
    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    (rollout,) = store.list_rollouts(limit=10)
    assert rollout.status == RolloutStatus.succeeded, rollout.error
    assert json.loads(rollout.output or "{}") == {
        "type": "message",
        "seen": {"GROQ_API_KEY": None, "GEMINI_API_KEY": None},
    }
    (call,) = [s for s in store.query_spans(rollout_id=rollout.id) if is_call_span(s.name)]
    assert call.attributes[CallAttr.API] == "messages"
    assert call.attributes[CallAttr.CHOICES][0]["token_ids"]  # recorded token-exact
