"""Reasoning models' thinking, told apart from their answer: a model whose chat template knows `<think>`
(Qwen3, DeepSeek-R1 and their kin) writes `<think>...</think>` before its answer, or after a generation
prompt that already opened `<think>`. The gateway gives the thinking to the agent apart, as each API
does (Chat Completions `reasoning_content`, Messages `thinking` blocks, Responses `reasoning` items), and
the record keeps the generated token ids whole: thinking tokens are the policy's tokens and are trained
on like the answer's.

Only the text is split; nothing is re-tokenized."""

from __future__ import annotations

from dataclasses import dataclass

OPEN = "<think>"
CLOSE = "</think>"


def is_reasoning_template(chat_template: str | None) -> bool:
    """Whether a chat template renders thinking (and so its model writes it)."""
    return bool(chat_template) and OPEN in str(chat_template)


def opens_thinking(prompt_text: str) -> bool:
    """Whether a rendered prompt ends inside an opened `<think>` (the model's text starts as thinking)."""
    tail = prompt_text.rstrip()
    return tail.endswith(OPEN)


@dataclass(frozen=True)
class Split:
    reasoning: str | None  # None: the text has no thinking
    content: str


def split_reasoning(text: str, opened: bool = False) -> Split:
    """The thinking and the answer of a generated text. `opened`: the prompt already opened `<think>`. An
    unclosed thinking (the model ran out of tokens) is all reasoning, with no answer."""
    if not opened:
        stripped = text.lstrip()
        if not stripped.startswith(OPEN):
            return Split(None, text)
        text = stripped[len(OPEN) :]
    thinking, closed, answer = text.partition(CLOSE)
    if not closed:
        return Split(thinking.strip("\n"), "")
    return Split(thinking.strip("\n"), answer.lstrip("\n"))


class StreamSplitter:
    """`split_reasoning` for a stream of text deltas: each delta becomes (reasoning, content) parts, a
    marker split across deltas held back until it is whole."""

    def __init__(self, opened: bool = False) -> None:
        self.state = "thinking" if opened else "start"  # start -> thinking -> answer, or start -> answer
        self.held = ""

    def feed(self, delta: str) -> tuple[str, str]:
        """The reasoning and the content this delta adds (either may be empty)."""
        text = self.held + delta
        self.held = ""
        reasoning = content = ""
        if self.state == "start":
            stripped = text.lstrip()
            if stripped.startswith(OPEN):
                self.state, text = "thinking", stripped[len(OPEN) :].lstrip("\n")
            elif OPEN.startswith(stripped):
                self.held = text  # perhaps the start of <think>
                return "", ""
            else:
                self.state = "answer"
        if self.state == "thinking":
            before, closed, after = text.partition(CLOSE)
            if closed:
                reasoning, self.state, text = before, "after", after
            else:
                keep = _partial_marker(text, CLOSE)
                reasoning, self.held = text[: len(text) - keep], text[len(text) - keep :]
                return reasoning, ""
        if self.state == "after":  # the newlines between </think> and the answer are not the answer's
            text = text.lstrip("\n")
            if not text:
                return reasoning, ""
            self.state = "answer"
        if self.state == "answer":
            content = text
        return reasoning, content

    def flush(self) -> tuple[str, str]:
        """What was held back at the end of the stream."""
        held, self.held = self.held, ""
        if self.state == "thinking":
            return held, ""
        return "", held if self.state in ("start", "answer") else ""


def _partial_marker(text: str, marker: str) -> int:
    """The length of the longest end of `text` that begins `marker`."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0
