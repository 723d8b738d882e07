"""A reasoning model's thinking in every dialect, with the real SDKs: Chat Completions
`reasoning_content`, Messages `thinking` blocks, Responses `reasoning` items, streamed and not; the
thinking an agent sends back reaches the model as the chat message's `reasoning_content`; the record
keeps every token, thinking included, and the transition trains on them all."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests.gateway.scripted_upstream import Script, scripted_rig
from tests.rigs import GatewayRig
from tether.adapters.build import build_transitions
from tether.gateway.dialects.messages import signature

THINKING = ["The user", " greets me", "."]
HELLO = [{"role": "user", "content": "Say hello."}]


@pytest.fixture
def script() -> Script:
    return Script(reasoning_pieces=list(THINKING))


@pytest.fixture
def srig(tmp_path: Path, script: Script) -> Iterator[GatewayRig]:
    yield from scripted_rig(tmp_path, script)


def exact(rig: GatewayRig, rollout_id: str, script: Script) -> None:
    """The call's transition holds every generated token, thinking first, all trained on."""
    [transition] = build_transitions(rig.store, [rollout_id]).transitions
    assert transition.response_ids == script.token_ids() and len(script.token_ids()) == 6
    assert transition.loss_mask == [1] * 6 and transition.response_logprobs == script.logprobs()


@pytest.mark.parametrize("stream", [False, True])
def test_chat_completions_give_reasoning_content_apart(
    srig: GatewayRig, script: Script, stream: bool
) -> None:
    rollout_id, base_url, key = srig.session()
    llm = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    if stream:
        chunks = list(llm.chat.completions.create(model="policy", messages=HELLO, stream=True))  # type: ignore[arg-type]
        deltas = [c.choices[0].delta.model_dump() for c in chunks if c.choices]
        thinking = "".join(d.get("reasoning_content") or "" for d in deltas)
        text = "".join(d.get("content") or "" for d in deltas)
    else:
        message = llm.chat.completions.create(model="policy", messages=HELLO).choices[0].message  # type: ignore[arg-type]
        thinking, text = message.model_dump()["reasoning_content"], message.content
    assert (thinking, text) == ("".join(THINKING), script.text)
    exact(srig, rollout_id, script)


@pytest.mark.parametrize("stream", [False, True])
def test_messages_answer_with_a_thinking_block_first(srig: GatewayRig, script: Script, stream: bool) -> None:
    rollout_id, _, key = srig.session()
    llm = anthropic.Anthropic(base_url=f"{srig.url}/rollouts/{rollout_id}", api_key=key, max_retries=0)
    options: dict[str, Any] = {
        "model": "policy",
        "messages": HELLO,
        "max_tokens": 2048,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }
    if stream:
        with llm.messages.stream(**options) as events:
            reply = events.get_final_message()
    else:
        reply = llm.messages.create(**options)
    thinking, text = reply.content
    assert thinking.type == "thinking" and thinking.thinking == "".join(THINKING)
    assert thinking.signature == signature(thinking.thinking)
    assert text.type == "text" and text.text == script.text
    exact(srig, rollout_id, script)


def test_messages_thinking_sent_back_reaches_the_model_and_redacted_thinking_does_not(
    srig: GatewayRig, script: Script
) -> None:
    rollout_id, _, key = srig.session()
    llm = anthropic.Anthropic(base_url=f"{srig.url}/rollouts/{rollout_id}", api_key=key, max_retries=0)
    earlier = [
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "thinking", "thinking": "I should greet.", "signature": "sig"},
        {"type": "text", "text": "Hello."},
    ]
    turns = [*HELLO, {"role": "assistant", "content": earlier}, {"role": "user", "content": "Again."}]
    llm.messages.create(model="policy", messages=turns, max_tokens=64)  # type: ignore[arg-type]
    sent = script.requests[-1]["messages"]
    assert sent[1] == {"role": "assistant", "content": "Hello.", "reasoning_content": "I should greet."}


@pytest.mark.parametrize("stream", [False, True])
def test_responses_answer_with_a_reasoning_item_first(srig: GatewayRig, script: Script, stream: bool) -> None:
    rollout_id, base_url, key = srig.session()
    llm = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    options: dict[str, Any] = {"model": "policy", "input": "Say hello.", "reasoning": {"effort": "low"}}
    if stream:
        with llm.responses.stream(**options) as events:
            kinds = [event.type for event in events]
            reply = events.get_final_response()
        assert kinds.count("response.reasoning_text.delta") == len(THINKING)
        assert kinds.index("response.reasoning_text.done") < kinds.index("response.output_text.delta")
    else:
        reply = llm.responses.create(**options)
    reasoning, message = reply.output
    assert reasoning.type == "reasoning" and reasoning.content is not None
    assert [part.text for part in reasoning.content] == ["".join(THINKING)]
    assert message.type == "message" and reply.output_text == script.text
    exact(srig, rollout_id, script)


def test_responses_reasoning_items_sent_back_join_their_answer(srig: GatewayRig, script: Script) -> None:
    _, base_url, key = srig.session()
    llm = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    items: list[Any] = [
        {"role": "user", "content": "Weather?"},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "Look it up."}],
        },
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "reasoning", "id": "rs_2", "summary": [{"type": "summary_text", "text": "Say it."}]},
        {"role": "assistant", "content": "Sunny."},
        {"role": "user", "content": "Thanks."},
    ]
    llm.responses.create(model="policy", input=items)
    sent = script.requests[-1]["messages"]
    assert sent[1]["reasoning_content"] == "Look it up." and sent[1]["tool_calls"][0]["id"] == "c1"
    assert sent[3] == {"role": "assistant", "content": "Sunny.", "reasoning_content": "Say it."}
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "assistant", "user"]
