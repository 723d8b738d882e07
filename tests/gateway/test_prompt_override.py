"""Prompt overrides: the pure rewrite of a chat body, the gateway applying a rollout's override to the
agent's recorded calls, and `tether.get_prompt` reading the candidate or the stored prompt."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

import tether
from tests.gateway.fake_upstream import Behaviour
from tests.rigs import GatewayRig
from tether.contracts import Meta
from tether.gateway.errors import GatewayError
from tether.gateway.prompts import apply_prompt_override, marked_span
from tether.prompts import PROMPT_CANDIDATE
from tether.store import RolloutRequest, Task

AGENT_SYSTEM = "You are ACME's bot. <<prompt>>Be brief.<</prompt>> Never share prices."


def chat(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "policy", "messages": list(messages)}


def system(content: Any, role: str = "system") -> dict[str, Any]:
    return {"role": role, "content": content}


USER = {"role": "user", "content": "hi"}


def test_a_string_replaces_the_first_system_message() -> None:
    body = chat(system("old"), USER, system("second"))
    out = apply_prompt_override(body, "new")
    assert out["messages"] == [system("new"), USER, system("second")]
    assert body["messages"][0] == system("old")  # the agent's body is not mutated


def test_replace_mode_inserts_when_there_is_no_system_message() -> None:
    out = apply_prompt_override(chat(USER), {"text": "new", "mode": "replace"})
    assert out["messages"] == [system("new"), USER]
    assert apply_prompt_override(chat(system("x", "developer"), USER), "new")["messages"][0] == system(
        "new", "developer"
    )


def test_marked_mode_replaces_only_the_marked_span() -> None:
    out = apply_prompt_override(chat(system(AGENT_SYSTEM), USER), {"text": "Be exact.", "mode": "marked"})
    assert out["messages"][0]["content"] == "You are ACME's bot. Be exact. Never share prices."
    parts = [{"type": "text", "text": "Intro. "}, {"type": "text", "text": "<<prompt>><</prompt>>!"}]
    out = apply_prompt_override(chat(system(parts), USER), {"text": "New", "mode": "marked"})
    assert out["messages"][0]["content"] == [parts[0], {"type": "text", "text": "New!"}]
    assert marked_span(AGENT_SYSTEM) == "Be brief." and marked_span("none") is None


def test_marked_mode_leaves_calls_without_markers_alone() -> None:
    for body in (chat(system("no markers"), USER), chat(USER)):
        assert apply_prompt_override(body, {"text": "x", "mode": "marked"}) is body


@pytest.mark.parametrize("bad", [3, {"mode": "marked"}, {"text": "x", "mode": "append"}])
def test_an_invalid_override_is_an_error(bad: Any) -> None:
    with pytest.raises(GatewayError) as info:
        apply_prompt_override(chat(USER), bad)
    assert info.value.status == 500 and info.value.code == "invalid_prompt_override"


def _running(rig: GatewayRig, metadata: dict[str, Any]) -> tuple[str, str, str]:
    rollout = rig.store.enqueue([RolloutRequest(task=Task(input={"q": 1}), metadata=metadata)])[0]
    claim = rig.store.claim("test")
    assert claim is not None and claim.rollout.id == rollout.id
    creds = rig.gateway.credentials(rollout.id)
    return rollout.id, creds["base_url"], creds["api_key"]


def test_the_gateway_overrides_the_marked_span_of_recorded_calls(
    rig: GatewayRig, behaviour: Behaviour
) -> None:
    rollout_id, base, key = _running(rig, {Meta.PROMPT_OVERRIDE: {"text": "Be exact.", "mode": "marked"}})
    response = httpx.post(
        f"{base}/chat/completions",
        json=chat(system(AGENT_SYSTEM), USER),
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 200, response.text
    expected = "You are ACME's bot. Be exact. Never share prices."
    assert behaviour.requests[-1]["messages"][0]["content"] == expected
    (span,) = rig.store.query_spans(rollout_id=rollout_id, name="llm.chat")
    assert span.attributes["request"]["messages"] == [system(expected), USER]


def test_an_invalid_override_never_reaches_the_upstream(rig: GatewayRig, behaviour: Behaviour) -> None:
    _, base, key = _running(rig, {Meta.PROMPT_OVERRIDE: {"text": 1}})
    response = httpx.post(
        f"{base}/chat/completions", json=chat(USER), headers={"Authorization": f"Bearer {key}"}
    )
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "invalid_prompt_override"
    assert behaviour.requests == []


def test_get_prompt_reads_the_candidate_then_the_store(
    rig: GatewayRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig.store.put_resource("system", "prompt", {"text": "stored v1", "score": 0.5})
    rig.store.put_resource("system", "prompt", "stored v2")
    rollout_id, _, key = _running(rig, {PROMPT_CANDIDATE: {"name": "system", "text": "the candidate"}})
    monkeypatch.setenv("TETHER_SERVER", rig.url)
    monkeypatch.setenv("OPENAI_API_KEY", key)
    monkeypatch.setenv("TETHER_ROLLOUT_ID", rollout_id)
    assert tether.get_prompt("system") == "the candidate"
    assert tether.get_prompt("system", version=1) == "stored v1"
    rig.store.put_resource("greeting", "prompt", "Hello {name}")
    assert tether.get_prompt("greeting") == "Hello {name}"
    assert tether.get_prompt("missing", default="fallback") == "fallback"
    with pytest.raises(LookupError, match="'missing' is not in the store"):
        tether.get_prompt("missing")
    monkeypatch.delenv("TETHER_ROLLOUT_ID")
    assert tether.get_prompt("system") == "stored v2"


def test_get_prompt_outside_tether(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TETHER_SERVER", "OPENAI_API_KEY", "TETHER_ROLLOUT_ID"):
        monkeypatch.delenv(name, raising=False)
    assert tether.get_prompt("system", default="built in") == "built in"
    with pytest.raises(LookupError, match="not running under Tether"):
        tether.get_prompt("system")
