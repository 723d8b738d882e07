"""End to end: an agent talks to the real gateway (built-in tiny engine); its calls become transitions."""

from __future__ import annotations

from typing import Any

import openai

from tests.rigs import GatewayRig
from tether.adapters import build_transitions
from tether.store import Reward, RolloutStatus


def test_a_two_turn_conversation_becomes_exact_transitions(engine_rig: GatewayRig, tiny_engine: Any) -> None:
    rollout_id, base_url, key = engine_rig.session()
    agent = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    messages: list[dict[str, str]] = [{"role": "user", "content": "Count to five."}]
    prompts, replies = [], []
    for follow_up in ("Keep going.", None):
        prompts.append(tiny_engine.chat_prompt_ids(messages))
        reply = agent.chat.completions.create(model="policy", messages=messages, max_tokens=6, temperature=0)
        replies.append(reply.choices[0].message.content or "")
        if follow_up:
            messages += [
                {"role": "assistant", "content": replies[-1]},
                {"role": "user", "content": follow_up},
            ]
    engine_rig.store.add_rewards([Reward(rollout_id=rollout_id, value=1.0)])
    engine_rig.store.update_status(rollout_id, RolloutStatus.succeeded)

    spans = engine_rig.store.query_spans(rollout_id=rollout_id)
    report = build_transitions(engine_rig.store, [rollout_id])
    assert report.calls == 2 and not report.skipped and len(report.transitions) == 2
    for transition, span, prompt, text in zip(report.transitions, spans, prompts, replies, strict=True):
        choice = span.attributes["choices"][0]
        assert transition.prompt_ids == span.attributes["prompt_token_ids"] == prompt
        assert transition.response_ids == choice["token_ids"]
        assert transition.response_logprobs == choice["logprobs"]
        assert tiny_engine.decode(transition.response_ids) == text
        assert (transition.reward, transition.policy_version) == (1.0, tiny_engine.policy_version)

    first, second = report.transitions
    extends = second.prompt_ids[: len(first.prompt_ids) + len(first.response_ids)] == (
        first.prompt_ids + first.response_ids
    )
    generated = [t for t in first.response_ids if t not in tiny_engine.eos_token_ids]
    assert extends == (tiny_engine.encode(replies[0]) == generated), (
        "merging is exactly canonical re-tokenization"
    )
    merged = build_transitions(engine_rig.store, [rollout_id], merge=True)
    if extends:
        assert merged.merged == 1 and len(merged.transitions) == 1
        assert merged.transitions[0].prompt_ids + merged.transitions[0].response_ids == (
            second.prompt_ids + second.response_ids
        )
    else:
        assert merged.merge_breaks == {"prefix_mismatch": 1} and len(merged.transitions) == 2
    assert f"{merged.merged} calls merged" in merged.summary()
