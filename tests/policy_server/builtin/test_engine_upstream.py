"""The gateway in front of the built-in engine (tiny random Llama): ids, logprobs and versions are exact."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import torch

from tests.rigs import GatewayRig, make_engine_rig
from tether.contracts import REFUSED_CALL_SPAN
from tether.engines.sampling import processed_logprobs
from tether.engines.transformers_engine import TransformersEngine
from tether.sampling import RAW, Sampler
from tether.store import Span

MESSAGES = [{"role": "user", "content": "Count to five."}]


def client(base_url: str, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)


def forward_logprobs(  # noqa: ANN001
    engine, prompt_ids: list[int], response_ids: list[int], sampler: Sampler = RAW
) -> list[float]:
    ids = torch.tensor([prompt_ids + response_ids])
    with torch.no_grad():
        logits = engine.model(ids).logits[0].float()
    logprobs = processed_logprobs(logits, sampler)
    start = len(prompt_ids)
    return [logprobs[start - 1 + i, token].item() for i, token in enumerate(response_ids)]


def refusals_only(spans: list[Span]) -> bool:
    return bool(spans) and all(span.name == REFUSED_CALL_SPAN for span in spans)


@pytest.mark.parametrize("stream", [False, True])
def test_recorded_ids_decode_to_text_and_logprobs_match_forward_pass(
    engine_rig: GatewayRig,
    tiny_engine,
    stream: bool,  # noqa: ANN001
) -> None:
    rollout_id, base_url, key = engine_rig.session()
    result = client(base_url, key).chat.completions.create(
        model="anything",
        messages=MESSAGES,
        max_tokens=12,
        temperature=1.2,
        top_p=0.9,
        seed=3,
        stream=stream,
        logprobs=True,
    )
    if stream:
        chunks = [chunk for chunk in result if chunk.choices]
        text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
        returned = [
            item.logprob for c in chunks if c.choices[0].logprobs for item in c.choices[0].logprobs.content
        ]
    else:
        text = result.choices[0].message.content
        returned = [item.logprob for item in result.choices[0].logprobs.content]
    span = engine_rig.store.query_spans(rollout_id=rollout_id)[0]
    choice = span.attributes["choices"][0]
    assert choice["text"] == text
    # the decoded ids are the text, plus the end-of-sequence token when generation stopped on it
    assert tiny_engine.decode(choice["token_ids"]).startswith(text)
    assert span.attributes["prompt_token_ids"] == tiny_engine.chat_prompt_ids(MESSAGES)
    # The logprobs are under the distribution the tokens were drawn from (temperature 1.2, top-p 0.9),
    # recorded with that sampler, and the agent is given the same numbers the span holds.
    sampler = Sampler.from_attr(span.attributes["sampling"])
    assert sampler == Sampler(temperature=1.2, top_p=0.9)
    expected = forward_logprobs(
        tiny_engine, span.attributes["prompt_token_ids"], choice["token_ids"], sampler
    )
    assert choice["logprobs"] == pytest.approx(expected, abs=1e-4)
    assert returned == pytest.approx(choice["logprobs"][: len(returned)], abs=1e-6)
    assert len(returned) >= len(choice["logprobs"]) - 1  # every token but a final end-of-sequence
    assert span.attributes["policy_version"] == tiny_engine.policy_version


def test_logprobs_and_token_ids_returned_when_asked(engine_rig: GatewayRig, tiny_engine) -> None:  # noqa: ANN001
    _, base_url, key = engine_rig.session()
    reply = client(base_url, key).chat.completions.create(
        model="policy", messages=MESSAGES, max_tokens=6, logprobs=True, extra_body={"return_token_ids": True}
    )
    data = reply.model_dump()
    assert len(data["choices"][0]["logprobs"]["content"]) == len(data["choices"][0]["token_ids"])
    assert data["prompt_token_ids"] == tiny_engine.chat_prompt_ids(MESSAGES)


def test_n_choices_are_recorded_separately(engine_rig: GatewayRig) -> None:
    rollout_id, base_url, key = engine_rig.session()
    reply = client(base_url, key).chat.completions.create(
        model="policy", messages=MESSAGES, max_tokens=5, n=3, seed=1
    )
    assert len(reply.choices) == 3
    choices = engine_rig.store.query_spans(rollout_id=rollout_id)[0].attributes["choices"]
    assert [c["text"] for c in choices] == [c.message.content for c in reply.choices]
    assert reply.usage.completion_tokens == sum(len(c["token_ids"]) for c in choices)


def test_token_in_token_out_completions(engine_rig: GatewayRig, tiny_engine) -> None:  # noqa: ANN001
    rollout_id, base_url, key = engine_rig.session()
    prompt_ids = tiny_engine.encode("Once upon a time")
    reply = client(base_url, key).completions.create(
        model="policy", prompt=prompt_ids, max_tokens=7, temperature=0
    )
    span = engine_rig.store.query_spans(rollout_id=rollout_id)[0]
    assert span.attributes["prompt_token_ids"] == prompt_ids
    assert len(span.attributes["choices"][0]["token_ids"]) == reply.usage.completion_tokens
    assert reply.choices[0].finish_reason in ("length", "stop")


def test_prompt_logprobs_answer_each_prompt_tokens_own_logprob(engine_rig: GatewayRig, tiny_engine) -> None:  # noqa: ANN001
    """vLLM's prompt_logprobs, as a distillation teacher is asked: None first, then per position the
    logprob of the token there, keyed by its id, the same numbers a forward pass gives."""
    _, base_url, key = engine_rig.session()
    prompt_ids = tiny_engine.encode("Once upon a time there was a teacher")
    reply = client(base_url, key).completions.create(
        model="teacher", prompt=prompt_ids, max_tokens=1, extra_body={"prompt_logprobs": 0}
    )
    entries = reply.choices[0].model_extra["prompt_logprobs"]
    assert len(entries) == len(prompt_ids) and entries[0] is None
    values = [entry[str(token)]["logprob"] for entry, token in zip(entries[1:], prompt_ids[1:], strict=True)]
    expected = forward_logprobs(tiny_engine, prompt_ids[:1], prompt_ids[1:])
    assert max(abs(a - b) for a, b in zip(values, expected, strict=True)) < 1e-4
    decoded = [
        entry[str(token)]["decoded_token"] for entry, token in zip(entries[1:], prompt_ids[1:], strict=True)
    ]
    assert decoded == [tiny_engine.decode([token]) for token in prompt_ids[1:]]


@pytest.mark.parametrize(
    "route, extra",
    [("completions", {"prompt_logprobs": 3}), ("completions", {"prompt_logprobs": True}), ("chat", {})],
)
def test_prompt_logprobs_the_engine_cannot_answer_are_a_clear_400(
    engine_rig: GatewayRig, route: str, extra: dict
) -> None:
    _, base_url, key = engine_rig.session()
    with pytest.raises(openai.BadRequestError) as raised:
        if route == "chat":
            client(base_url, key).chat.completions.create(
                model="policy", messages=MESSAGES, max_tokens=2, extra_body={"prompt_logprobs": 0}
            )
        else:
            client(base_url, key).completions.create(
                model="policy", prompt="hi", max_tokens=2, extra_body=extra
            )
    assert "prompt_logprobs" in raised.value.message


def test_prompt_longer_than_context_is_a_clear_400(engine_rig: GatewayRig, tiny_engine) -> None:  # noqa: ANN001
    _, base_url, key = engine_rig.session()
    too_long = [tiny_engine.encode("hello")[0]] * (tiny_engine.max_context + 5)
    with pytest.raises(openai.BadRequestError) as raised:
        client(base_url, key).completions.create(model="policy", prompt=too_long, max_tokens=4)
    assert "context" in raised.value.message


def test_bad_sampling_parameters_are_400(engine_rig: GatewayRig) -> None:
    _, base_url, key = engine_rig.session()
    for bad in ({"temperature": 7}, {"top_p": -1}, {"max_tokens": 0}, {"stop": [1, 2]}, {"n": 99}):
        with pytest.raises(openai.BadRequestError):
            client(base_url, key).chat.completions.create(model="policy", messages=MESSAGES, **bad)
    assert refusals_only(engine_rig.store.query_spans())  # no model call; the refusals kept


def test_adapter_swap_changes_recorded_policy_version(engine_rig: GatewayRig, tiny_engine, tmp_path) -> None:  # noqa: ANN001
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from tether.models.catalog import resolve_model

    base = AutoModelForCausalLM.from_pretrained(resolve_model("tiny-random"))
    config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(base, config).save_pretrained(tmp_path / "adapter")

    before = tiny_engine.policy_version
    rollout_id, base_url, key = engine_rig.session()
    llm = client(base_url, key)
    llm.chat.completions.create(model="policy", messages=MESSAGES, max_tokens=4, temperature=0)
    version = asyncio.run(tiny_engine.aload_adapter(str(tmp_path / "adapter")))
    llm.chat.completions.create(model="policy", messages=MESSAGES, max_tokens=4, temperature=0)
    versions = [s.attributes["policy_version"] for s in engine_rig.store.query_spans(rollout_id=rollout_id)]
    assert versions == [before, version] and version == before + 1


# -- tool calls ---------------------------------------------------------------------------------------

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TOOL_MESSAGES = [{"role": "user", "content": "Weather in Paris and Oslo?"}]
TWO_CALLS = (
    'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}\n</tool_call>'
)
BROKEN_CALL = 'Sure <tool_call>\n{"name": "get_weather", "arguments": {"city": </tool_call>'


class ScriptedEngine(TransformersEngine):
    """The tiny engine with its sampler replaced by a script: every row emits `script`, then EOS.

    Everything else is the real engine: decoding loop, streaming text, and logprobs of the scripted
    tokens under the model, so the gateway records exactly what a model writing this text would give.
    """

    script: list[int] = []  # noqa: RUF012

    def _sample_and_emit(self, rows, logits):  # noqa: ANN001, ANN202
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        chosen = torch.tensor([self._scripted(len(row.token_ids)) for row in rows], device=logits.device)
        picked = logprobs.gather(1, chosen[:, None]).squeeze(1)
        for row, token, logprob in zip(rows, chosen.tolist(), picked.tolist(), strict=True):
            if not row.done:
                self._emit(row, token, logprob)
        return chosen

    def _scripted(self, step: int) -> int:
        return self.script[step] if step < len(self.script) else min(self.eos_token_ids)


@pytest.fixture(scope="module")
def scripted_engine() -> Iterator[ScriptedEngine]:
    engine = ScriptedEngine("tiny-random", max_batch_size=4)
    yield engine
    engine.close()


@pytest.fixture
def scripted_rig(tmp_path: Path, scripted_engine: ScriptedEngine) -> Iterator[GatewayRig]:
    yield from make_engine_rig(tmp_path, scripted_engine)


def script(engine: ScriptedEngine, text: str) -> list[int]:
    """Make the engine write `text`; returns the ids it will generate (the text's, then EOS)."""
    engine.script = engine.encode(text)
    assert engine.decode(engine.script) == text
    return engine.script + [min(engine.eos_token_ids)]


def only_span(rig: GatewayRig, rollout_id: str):  # noqa: ANN201
    spans = rig.store.query_spans(rollout_id=rollout_id)
    assert len(spans) == 1
    return spans[0]


def test_tool_calls_come_back_parsed_and_raw_ids_are_recorded(
    scripted_rig: GatewayRig, scripted_engine: ScriptedEngine
) -> None:
    expected_ids = script(scripted_engine, TWO_CALLS)
    rollout_id, base_url, key = scripted_rig.session()
    reply = client(base_url, key).chat.completions.create(
        model="policy", messages=TOOL_MESSAGES, tools=[WEATHER_TOOL], max_tokens=200
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me look."
    calls = choice.message.tool_calls
    assert [(c.type, c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("function", "get_weather", {"city": "Paris"}),
        ("function", "get_weather", {"city": "Oslo"}),
    ]
    assert all(c.id.startswith("call_") for c in calls) and calls[0].id != calls[1].id

    span = only_span(scripted_rig, rollout_id)
    recorded = span.attributes["choices"][0]
    assert recorded["token_ids"] == expected_ids
    assert recorded["text"] == TWO_CALLS and "tool_parse_error" not in recorded
    prompt_ids = scripted_engine.chat_prompt_ids(TOOL_MESSAGES, [WEATHER_TOOL])
    assert span.attributes["prompt_token_ids"] == prompt_ids
    assert "# Tools" in scripted_engine.decode(prompt_ids)
    assert recorded["logprobs"] == pytest.approx(
        forward_logprobs(scripted_engine, prompt_ids, expected_ids), abs=1e-4
    )
    assert span.attributes["response"]["choices"][0]["message"]["tool_calls"][0]["id"] == calls[0].id


def test_streamed_tool_calls_accumulate_in_the_sdk(
    scripted_rig: GatewayRig, scripted_engine: ScriptedEngine
) -> None:
    expected_ids = script(scripted_engine, TWO_CALLS)
    rollout_id, base_url, key = scripted_rig.session()
    llm = client(base_url, key)
    with llm.chat.completions.stream(
        model="policy", messages=TOOL_MESSAGES, tools=[WEATHER_TOOL], max_tokens=200, logprobs=True
    ) as stream:
        events = list(stream)
        final = stream.get_final_completion()
    done = [e for e in events if e.type == "tool_calls.function.arguments.done"]
    assert [(e.index, e.name) for e in done] == [(0, "get_weather"), (1, "get_weather")]
    content_deltas = [e.delta for e in events if e.type == "content.delta"]
    assert "".join(content_deltas) == "Let me look."
    assert all("<" not in piece for piece in content_deltas)  # no half tool call leaked as content
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me look."
    assert [json.loads(c.function.arguments) for c in choice.message.tool_calls] == [
        {"city": "Paris"},
        {"city": "Oslo"},
    ]
    recorded = only_span(scripted_rig, rollout_id).attributes["choices"][0]
    assert recorded["token_ids"] == expected_ids and recorded["text"] == TWO_CALLS
    # chunks carry the logprobs of the tokens sent before the first block; the record has them all
    streamed = [lp.logprob for lp in choice.logprobs.content]
    assert 0 < len(streamed) < len(expected_ids)
    assert streamed == pytest.approx(recorded["logprobs"][: len(streamed)])


@pytest.mark.parametrize("stream", [False, True])
def test_unparseable_call_is_content_with_the_flag_on_the_span(
    scripted_rig: GatewayRig, scripted_engine: ScriptedEngine, stream: bool
) -> None:
    expected_ids = script(scripted_engine, BROKEN_CALL)
    rollout_id, base_url, key = scripted_rig.session()
    result = client(base_url, key).chat.completions.create(
        model="policy", messages=TOOL_MESSAGES, tools=[WEATHER_TOOL], max_tokens=200, stream=stream
    )
    if stream:
        chunks = [chunk for chunk in result if chunk.choices]
        content = "".join(c.choices[0].delta.content or "" for c in chunks)
        assert not any(c.choices[0].delta.tool_calls for c in chunks)
        finish = chunks[-1].choices[0].finish_reason
    else:
        content, finish = result.choices[0].message.content, result.choices[0].finish_reason
        assert result.choices[0].message.tool_calls is None
    assert content == BROKEN_CALL and finish == "stop"
    recorded = only_span(scripted_rig, rollout_id).attributes["choices"][0]
    assert "not valid JSON" in recorded["tool_parse_error"]
    assert recorded["token_ids"] == expected_ids and recorded["text"] == BROKEN_CALL


def test_tool_choice_none_renders_no_tools_and_parses_nothing(
    scripted_rig: GatewayRig, scripted_engine: ScriptedEngine
) -> None:
    script(scripted_engine, TWO_CALLS)
    rollout_id, base_url, key = scripted_rig.session()
    reply = client(base_url, key).chat.completions.create(
        model="policy", messages=TOOL_MESSAGES, tools=[WEATHER_TOOL], tool_choice="none", max_tokens=200
    )
    assert reply.choices[0].message.content == TWO_CALLS
    assert reply.choices[0].message.tool_calls is None and reply.choices[0].finish_reason == "stop"
    span = only_span(scripted_rig, rollout_id)
    assert span.attributes["prompt_token_ids"] == scripted_engine.chat_prompt_ids(TOOL_MESSAGES)
    assert "tool_parse_error" not in span.attributes["choices"][0]


def test_a_conversation_with_tool_results_renders_in_the_fallback(
    scripted_rig: GatewayRig, scripted_engine: ScriptedEngine
) -> None:
    script(scripted_engine, "Sunny in Paris.")
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    messages = [
        *TOOL_MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    rollout_id, base_url, key = scripted_rig.session()
    reply = client(base_url, key).chat.completions.create(
        model="policy", messages=messages, tools=[WEATHER_TOOL], tool_choice="required", max_tokens=50
    )
    assert reply.choices[0].message.content == "Sunny in Paris." and reply.choices[0].finish_reason == "stop"
    prompt = scripted_engine.decode(only_span(scripted_rig, rollout_id).attributes["prompt_token_ids"])
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
        in prompt
    )
    assert "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>" in prompt
    assert "must call at least one" in prompt


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": [{"type": "function", "function": {"parameters": {}}}]}, "tools"),
        (
            {"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice",
        ),
        ({"tool_choice": "required"}, "tool_choice"),
    ],
)
def test_bad_tools_are_a_clear_400(engine_rig: GatewayRig, extra: dict, param: str) -> None:
    _, base_url, key = engine_rig.session()
    with pytest.raises(openai.BadRequestError) as raised:
        client(base_url, key).chat.completions.create(model="policy", messages=MESSAGES, **extra)
    assert raised.value.body["param"] == param
    assert refusals_only(engine_rig.store.query_spans())  # no model call; the refusals kept
