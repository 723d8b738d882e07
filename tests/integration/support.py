"""What the framework tests share: a session as an agent sees it, and checks on the recorded spans."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from tests.integration.scripted_upstream import TOKEN_LOGPROB, Script
from tests.integration.tools import CITY, TOOL_RESULT
from tests.rigs import GatewayRig
from tether.store.records import Span

MODEL = "policy"  # a name no framework knows: every call must go to the gateway's route


@dataclass
class Session:
    """A running rollout as an agent sees it: its base URL and API key."""

    rig: GatewayRig
    rollout_id: str
    base_url: str
    api_key: str

    @property
    def root_url(self) -> str:
        """The base URL without its `/v1`, for SDKs that add `/v1` themselves (Anthropic)."""
        return self.base_url.removesuffix("/v1")

    def spans(self) -> list[Span]:
        return self.rig.store.query_spans(rollout_id=self.rollout_id)


@dataclass
class Scripted:
    """A session on a gateway whose model plays `script.turns`."""

    script: Script
    session: Session


def open_session(rig: GatewayRig) -> Session:
    return Session(rig, *rig.session())


def assert_recorded(session: Session, script: Script) -> list[Span]:
    """One ok span per scripted model call, each with exactly the ids the upstream reported."""
    spans = session.spans()
    assert len(spans) == len(script.exchanges), [s.attributes.get("request") for s in spans]
    for span, exchange in zip(spans, script.exchanges, strict=True):
        attrs = span.attributes
        assert span.status == "ok", span.status_message
        assert attrs["prompt_token_ids"] == exchange.prompt_token_ids
        assert attrs["choices"][0]["token_ids"] == exchange.token_ids
        assert attrs["choices"][0]["logprobs"] == [pytest.approx(TOKEN_LOGPROB)] * len(exchange.token_ids)
        assert attrs["choices"][0]["finish_reason"] == exchange.turn.finish_reason
    return spans


def recorded_tool_calls(span: Span) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls of a span's recorded answer as (name, arguments). The gateway records the chat
    completions answer for every API (a Responses or Messages call is translated to one)."""
    message = span.attributes["response"]["choices"][0].get("message") or {}
    return [
        (call["function"]["name"], json.loads(call["function"]["arguments"]))
        for call in message.get("tool_calls") or []
    ]


def tool_results_sent(script: Script, call: int) -> list[str]:
    """The contents of the tool messages in the `call`-th request the model received."""
    messages = script.requests[call].get("messages") or []
    return [_text(m.get("content")) for m in messages if m.get("role") == "tool"]


def assert_weather_round_trip(scripted: Scripted) -> list[Span]:
    """Checks a run of `WEATHER_TOOL_SCRIPT`: both calls recorded, the first asking for the weather in
    `CITY`, and the tool's result sent back to the model in the second. Returns the two spans."""
    spans = assert_recorded(scripted.session, scripted.script)
    assert recorded_tool_calls(spans[0]) == [("get_weather", {"city": CITY})]
    assert tool_results_sent(scripted.script, 1) == [TOOL_RESULT]
    return spans


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def assert_engine_span(session: Session, answer: str) -> Span:
    """Exactly one ok span, from the engine, whose recorded text is what the framework returned."""
    spans = session.spans()
    assert len(spans) == 1
    attrs = spans[0].attributes
    assert spans[0].status == "ok", spans[0].status_message
    assert attrs["upstream"] == "policy" and attrs["policy_version"] is not None
    assert attrs["prompt_token_ids"] and attrs["choices"][0]["token_ids"]
    assert len(attrs["choices"][0]["logprobs"]) == len(attrs["choices"][0]["token_ids"])
    assert attrs["choices"][0]["text"] == answer
    return spans[0]
