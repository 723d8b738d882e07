"""The built-in engine with a reasoning chat template (think_template.jinja, Qwen3's manner, on
tiny-random): the thinking is given to the agent apart, streamed or not, the record keeps every
generated token, and when the template leaves an earlier turn's thinking out of the next prompt, the
merge break is counted as `reasoning_dropped`, the transitions still exact."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.rigs import GatewayRig
from tether.adapters.build import build_transitions
from tether.contracts import CallAttr
from tether.models.reasoning import split_reasoning

TEMPLATE = (Path(__file__).parent / "think_template.jinja").read_text()
HELLO = [{"role": "user", "content": "Say hello."}]


@pytest.fixture
def thinking_engine(tiny_engine: Any) -> Iterator[Any]:
    saved = tiny_engine.tokenizer.chat_template
    tiny_engine.tokenizer.chat_template = TEMPLATE
    yield tiny_engine
    tiny_engine.tokenizer.chat_template = saved


def test_thinking_is_given_apart_recorded_whole_and_a_dropped_thinking_counted(
    engine_rig: GatewayRig, thinking_engine: Any
) -> None:
    rollout_id, base_url, key = engine_rig.session()
    llm = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    first = llm.chat.completions.create(model="policy", messages=HELLO, max_tokens=8).choices[0].message  # type: ignore[arg-type]
    said = first.model_dump()
    stream = llm.chat.completions.create(model="policy", messages=HELLO, max_tokens=8, stream=True)  # type: ignore[arg-type]
    deltas = [chunk.choices[0].delta.model_dump() for chunk in stream if chunk.choices]
    turns = [
        *HELLO,
        {"role": "assistant", "content": said["content"], "reasoning_content": said["reasoning_content"]},
    ]
    llm.chat.completions.create(
        model="policy", messages=[*turns, {"role": "user", "content": "Again."}], max_tokens=8
    )  # type: ignore[arg-type]

    spans = engine_rig.store.query_spans(rollout_id=rollout_id)
    texts = [span.attributes[CallAttr.CHOICES][0]["text"] for span in spans]
    # the prompt opened <think>: all the random text is thinking, and there is no answer
    assert (said["reasoning_content"], said["content"]) == (
        split_reasoning(texts[0], opened=True).reasoning,
        "",
    )
    streamed = "".join(d.get("reasoning_content") or "" for d in deltas)
    assert streamed.strip("\n") == split_reasoning(texts[1], opened=True).reasoning
    assert not "".join(d.get("content") or "" for d in deltas)

    report = build_transitions(engine_rig.store, [rollout_id], merge=True)
    assert report.merge_breaks == {"reasoning_dropped": 2}  # each call starts a transition of its own
    for transition, span in zip(report.transitions, spans, strict=True):
        choice = span.attributes[CallAttr.CHOICES][0]
        assert transition.response_ids == choice["token_ids"] and set(transition.loss_mask) == {1}
        assert transition.prompt_ids == span.attributes[CallAttr.PROMPT_TOKEN_IDS]
