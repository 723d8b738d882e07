"""The gateway in front of the built-in engine (tiny random Llama): ids, logprobs and versions are exact."""

from __future__ import annotations

import asyncio

import openai
import pytest
import torch

from tests.rigs import GatewayRig

MESSAGES = [{"role": "user", "content": "Count to five."}]


def client(base_url: str, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)


def forward_logprobs(engine, prompt_ids: list[int], response_ids: list[int]) -> list[float]:  # noqa: ANN001
    ids = torch.tensor([prompt_ids + response_ids])
    with torch.no_grad():
        logits = engine.model(ids).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    start = len(prompt_ids)
    return [logprobs[start - 1 + i, token].item() for i, token in enumerate(response_ids)]


@pytest.mark.parametrize("stream", [False, True])
def test_recorded_ids_decode_to_text_and_logprobs_match_forward_pass(
    engine_rig: GatewayRig,
    tiny_engine,
    stream: bool,  # noqa: ANN001
) -> None:
    rollout_id, base_url, key = engine_rig.session()
    result = client(base_url, key).chat.completions.create(
        model="anything", messages=MESSAGES, max_tokens=12, temperature=1.2, top_p=0.9, seed=3, stream=stream
    )
    if stream:
        text = "".join(chunk.choices[0].delta.content or "" for chunk in result if chunk.choices)
    else:
        text = result.choices[0].message.content
    span = engine_rig.store.query_spans(rollout_id=rollout_id)[0]
    choice = span.attributes["choices"][0]
    assert choice["text"] == text
    # the decoded ids are the text, plus the end-of-sequence token when generation stopped on it
    assert tiny_engine.decode(choice["token_ids"]).startswith(text)
    assert span.attributes["prompt_token_ids"] == tiny_engine.chat_prompt_ids(MESSAGES)
    expected = forward_logprobs(tiny_engine, span.attributes["prompt_token_ids"], choice["token_ids"])
    assert choice["logprobs"] == pytest.approx(expected, abs=1e-4)
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
    assert engine_rig.store.query_spans() == []


def test_adapter_swap_changes_recorded_policy_version(engine_rig: GatewayRig, tiny_engine, tmp_path) -> None:  # noqa: ANN001
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from tether.engines import resolve_model

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
