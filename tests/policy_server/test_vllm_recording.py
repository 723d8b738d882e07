"""Calls through the gateway to a real vLLM server: the recorded token ids are vLLM's own, exactly, and the
tools prompt is the one the built-in engine gives the same model."""

from __future__ import annotations

import pytest

from tests.gateway.test_recording import client, only_span
from tests.policy_server.conftest import direct
from tests.rigs import GatewayRig
from tether.policy_server.vllm import VLLMPolicyServer

MESSAGES = [{"role": "user", "content": "What is 12 plus 30? Answer with the number."}]
GREEDY = {"temperature": 0.0, "max_tokens": 16, "seed": 1}


@pytest.mark.parametrize("stream", [False, True])
def test_chat_ids_are_exactly_vllms(
    vllm_rig: GatewayRig, vllm_server: VLLMPolicyServer, stream: bool
) -> None:
    rollout_id, base_url, key = vllm_rig.session()
    result = client(base_url, key).chat.completions.create(
        model="policy", messages=MESSAGES, stream=stream, **GREEDY
    )
    text = (
        "".join(c.choices[0].delta.content or "" for c in result if c.choices)
        if stream
        else result.choices[0].message.content
    )
    attrs = only_span(vllm_rig, rollout_id).attributes
    answer = direct(vllm_server, "/chat/completions", {"messages": MESSAGES, "logprobs": True, **GREEDY})
    assert attrs["prompt_token_ids"] == answer["prompt_token_ids"]
    assert attrs["choices"][0]["token_ids"] == answer["choices"][0]["token_ids"]
    assert attrs["choices"][0]["text"] == text == answer["choices"][0]["message"]["content"]
    logprobs = [item["logprob"] for item in answer["choices"][0]["logprobs"]["content"]]
    assert attrs["choices"][0]["logprobs"] == pytest.approx(logprobs, abs=1e-4)
    assert attrs["policy_version"] == vllm_server.policy_version  # never None for a managed server


@pytest.mark.parametrize("stream", [False, True])
def test_completions_take_token_ids_in(
    vllm_rig: GatewayRig, vllm_server: VLLMPolicyServer, stream: bool
) -> None:
    prompt = direct(vllm_server, "/chat/completions", {"messages": MESSAGES, "max_tokens": 1})[
        "prompt_token_ids"
    ]
    rollout_id, base_url, key = vllm_rig.session()
    result = client(base_url, key).completions.create(model="policy", prompt=prompt, stream=stream, **GREEDY)
    text = "".join(c.choices[0].text for c in result) if stream else result.choices[0].text
    attrs = only_span(vllm_rig, rollout_id).attributes
    answer = direct(vllm_server, "/completions", {"prompt": prompt, **GREEDY})
    assert attrs["prompt_token_ids"] == prompt
    assert attrs["choices"][0]["token_ids"] == answer["choices"][0]["token_ids"]
    assert attrs["choices"][0]["text"] == text


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]
TOOL_HISTORY = [
    {"role": "system", "content": "You solve arithmetic with the calculator."},
    {"role": "user", "content": "What is 6 times 7?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "calculator", "arguments": '{"expression": "6*7"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "42"},
]


def test_tools_prompt_is_the_builtin_engines(vllm_rig: GatewayRig) -> None:
    """vLLM serves SmolLM2 with Tether's tools template: the prompt it builds from tools and tool history
    is token for token the one the built-in engine's fallback format builds."""
    from transformers import AutoTokenizer

    from tether.models.catalog import resolve_model
    from tether.models.tools import prepare_messages

    rollout_id, base_url, key = vllm_rig.session()
    client(base_url, key).chat.completions.create(
        model="policy",
        messages=TOOL_HISTORY,
        tools=TOOLS,
        **GREEDY,  # type: ignore[arg-type]
    )
    attrs = only_span(vllm_rig, rollout_id).attributes
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m"))
    builtin = tokenizer.apply_chat_template(
        prepare_messages(TOOL_HISTORY, TOOLS), add_generation_prompt=True, tokenize=True
    )
    builtin_ids = builtin if isinstance(builtin, list) else list(builtin["input_ids"])
    assert attrs["prompt_token_ids"] == builtin_ids
    assert "<tool_call>" in tokenizer.decode(attrs["prompt_token_ids"])
