"""Merging multi-turn calls rendered with the real SmolLM2 tokenizer and ChatML chat template.

The agent sends messages (text); the engine renders them with the chat template. Turn 2 re-renders the
assistant's reply from its text, so merging works exactly when that re-rendering reproduces the ids the
model generated.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.adapters.calls import call_span, running_rollout
from tether.adapters import TransitionReport, build_transitions
from tether.store import SQLiteStore

pytestmark = pytest.mark.smollm2  # the real SmolLM2 tokenizer and chat template
SYSTEM_AND_USER = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "What is 2+2?"},
]
REPLY = "The answer is 4."


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from transformers import AutoTokenizer

    from tether.models.catalog import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model("smollm2-135m"))


def render(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(rendered["input_ids"] if hasattr(rendered, "keys") else rendered)


def encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def im_end(tokenizer: Any) -> int:
    return int(tokenizer.convert_tokens_to_ids("<|im_end|>"))


def two_turns(
    store: SQLiteStore, tokenizer: Any, generated: list[int], content: str, next_turn: dict[str, str]
) -> tuple[TransitionReport, list[int], list[int]]:
    """Turn 1 generates `generated`; the agent appends `content` as the assistant message and calls again."""
    rollout = running_rollout(store)
    first_prompt = render(tokenizer, SYSTEM_AND_USER)
    second_prompt = render(
        tokenizer, [*SYSTEM_AND_USER, {"role": "assistant", "content": content}, next_turn]
    )
    second_reply = encode(tokenizer, "Done.") + [im_end(tokenizer)]
    store.add_spans(
        [call_span(rollout.id, first_prompt, generated), call_span(rollout.id, second_prompt, second_reply)]
    )
    return build_transitions(store, [rollout], merge=True), first_prompt, second_prompt


TOOL_TURN = {"role": "tool", "content": "4"}
USER_TURN = {"role": "user", "content": "And 3+3?"}


@pytest.mark.parametrize("next_turn", [TOOL_TURN, USER_TURN])
def test_a_canonical_reply_ending_in_im_end_extends_the_prefix(
    store: SQLiteStore, tokenizer: Any, next_turn: dict[str, str]
) -> None:
    generated = encode(tokenizer, REPLY) + [im_end(tokenizer)]
    report, first_prompt, second_prompt = two_turns(store, tokenizer, generated, REPLY, next_turn)

    (merged,) = report.transitions
    assert report.merged == 1 and not report.merge_breaks
    observation = second_prompt[len(first_prompt) + len(generated) :]
    rendered_turn = (
        f"\n<|im_start|>{next_turn['role']}\n{next_turn['content']}<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tokenizer.decode(observation) == rendered_turn
    assert merged.prompt_ids == first_prompt
    assert merged.prompt_ids + merged.response_ids == second_prompt + encode(tokenizer, "Done.") + [
        im_end(tokenizer)
    ]
    mask = merged.loss_mask
    assert mask == [1] * len(generated) + [0] * len(observation) + [1] * (
        len(mask) - len(generated) - len(observation)
    )


def test_a_reply_cut_by_max_tokens_extends_and_the_template_im_end_is_masked(
    store: SQLiteStore, tokenizer: Any
) -> None:
    generated = encode(tokenizer, REPLY)
    report, _, _ = two_turns(store, tokenizer, generated, REPLY, TOOL_TURN)
    (merged,) = report.transitions
    assert merged.response_ids[len(generated)] == im_end(tokenizer)
    assert merged.loss_mask[len(generated)] == 0


def test_a_leading_newline_still_extends(store: SQLiteStore, tokenizer: Any) -> None:
    text = "\n" + REPLY
    generated = encode(tokenizer, text) + [im_end(tokenizer)]
    report, _, _ = two_turns(store, tokenizer, generated, text, TOOL_TURN)
    assert report.merged == 1


def test_a_non_canonical_tokenization_of_the_same_text_breaks_the_chain(
    store: SQLiteStore, tokenizer: Any
) -> None:
    generated = encode(tokenizer, "The") + encode(tokenizer, " ans") + encode(tokenizer, "wer is 4.")
    assert tokenizer.decode(generated) == REPLY and generated != encode(tokenizer, REPLY)
    report, first_prompt, second_prompt = two_turns(
        store, tokenizer, generated + [im_end(tokenizer)], REPLY, TOOL_TURN
    )
    assert report.merge_breaks == {"prefix_mismatch": 1} and report.merged == 0
    assert [t.prompt_ids for t in report.transitions] == [first_prompt, second_prompt]


@pytest.mark.parametrize(
    ("generated_text", "content"),
    [
        ("Action: search\nObservation", "Action: search"),
        ("The answer is 4.  ", REPLY),
    ],
    ids=["stop-string-cut", "agent-strips-whitespace"],
)
def test_a_reply_whose_text_differs_from_its_tokens_breaks_the_chain(
    store: SQLiteStore, tokenizer: Any, generated_text: str, content: str
) -> None:
    report, _, _ = two_turns(store, tokenizer, encode(tokenizer, generated_text), content, TOOL_TURN)
    assert report.merge_breaks == {"prefix_mismatch": 1} and len(report.transitions) == 2


def test_three_turns_merge_into_one_sequence(store: SQLiteStore, tokenizer: Any) -> None:
    rollout = running_rollout(store)
    messages = list(SYSTEM_AND_USER)
    spans = []
    for turn, text in enumerate(["Let me check.", "It is 4."]):
        prompt = render(tokenizer, messages)
        spans.append(call_span(rollout.id, prompt, encode(tokenizer, text) + [im_end(tokenizer)]))
        messages += [{"role": "assistant", "content": text}, {"role": "tool", "content": f"result {turn}"}]
    final_prompt = render(tokenizer, messages)
    spans.append(call_span(rollout.id, final_prompt, encode(tokenizer, "Bye") + [im_end(tokenizer)]))
    store.add_spans(spans)

    report = build_transitions(store, [rollout], merge=True)
    (merged,) = report.transitions
    assert report.merged == 2 and merged.merged_calls == 3
    assert tokenizer.decode(merged.prompt_ids + merged.response_ids).endswith(
        "<|im_start|>assistant\nBye<|im_end|>"
    )
    trained = [t for t, m in zip(merged.response_ids, merged.loss_mask, strict=True) if m]
    assert tokenizer.decode(trained) == "Let me check.<|im_end|>It is 4.<|im_end|>Bye<|im_end|>"
