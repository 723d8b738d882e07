"""A reasoning model's thinking told apart from its answer (`tether.models.reasoning`), whole and as a
stream cut anywhere."""

from __future__ import annotations

import random

from tether.models.reasoning import StreamSplitter, is_reasoning_template, opens_thinking, split_reasoning

THOUGHT = "<think>\nThe user wants 2+2. </thi is not a tag.\n</think>\n\nAnswer: 4 (not </think>)"


def test_thinking_and_answer_are_told_apart_and_plain_text_is_left_alone() -> None:
    split = split_reasoning(THOUGHT)
    assert (split.reasoning, split.content) == (
        "The user wants 2+2. </thi is not a tag.",
        "Answer: 4 (not </think>)",
    )
    assert split_reasoning("Answer: 4") == split_reasoning("Answer: 4", opened=False)
    assert split_reasoning("Answer: 4").reasoning is None
    # a prompt that opened <think> itself: the text starts inside the thinking
    assert split_reasoning("hmm\n</think>\n\nok", opened=True).content == "ok"
    # out of tokens while thinking: all of it is thinking, there is no answer
    assert (
        split_reasoning("<think>still going").reasoning,
        split_reasoning("<think>still going").content,
    ) == (
        "still going",
        "",
    )


def test_a_stream_cut_anywhere_gives_the_same_thinking_and_answer() -> None:
    rng = random.Random(0)
    whole = split_reasoning(THOUGHT)
    for _ in range(300):
        cuts = sorted(rng.sample(range(1, len(THOUGHT)), rng.randint(1, 12)))
        pieces = [THOUGHT[a:b] for a, b in zip([0, *cuts], [*cuts, len(THOUGHT)], strict=True)]
        splitter = StreamSplitter()
        parts = [splitter.feed(piece) for piece in pieces] + [splitter.flush()]
        reasoning, content = "".join(r for r, _ in parts), "".join(c for _, c in parts)
        assert (reasoning.strip("\n"), content) == (whole.reasoning, whole.content), pieces
    plain = StreamSplitter()
    assert [plain.feed(p) for p in ("Ans", "wer: 4")] + [plain.flush()] == [
        ("", "Ans"),
        ("", "wer: 4"),
        ("", ""),
    ]
    early = StreamSplitter()  # a text that starts like <think> and is not
    assert early.feed("<th") == ("", "") and early.feed("ree") == ("", "<three") and early.flush() == ("", "")


def test_reasoning_templates_and_prompts_that_open_thinking_are_recognised() -> None:
    assert is_reasoning_template("{% if x %}<think>{{ r }}</think>{% endif %}")
    assert not is_reasoning_template("{{ message.content }}") and not is_reasoning_template(None)
    assert opens_thinking("<|im_start|>assistant\n<think>\n") and not opens_thinking(
        "<|im_start|>assistant\n"
    )
