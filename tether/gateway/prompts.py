"""Prompt overrides: the gateway puts a candidate system prompt into an agent's chat calls, so that
prompt optimization needs no change to the agent's code.

A rollout's metadata key `prompt_override` holds either a string (the candidate replaces the first
system/developer message, or is inserted as one) or `{"text": ..., "mode": "replace" | "marked"}`.
In `marked` mode only the marked span of the agent's system message is replaced, markers included:

    "You are a support bot for ACME. <<prompt>>Be brief.<</prompt>> Never share prices."

becomes "You are a support bot for ACME. {text} Never share prices." A call whose system message has no
marked span goes upstream unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from tether.gateway.errors import GatewayError

OPEN_MARKER = "<<prompt>>"
CLOSE_MARKER = "<</prompt>>"
MARKED_SPAN = re.compile(re.escape(OPEN_MARKER) + r"(.*?)" + re.escape(CLOSE_MARKER), re.DOTALL)
SYSTEM_ROLES = ("system", "developer")
OverrideMode = Literal["replace", "marked"]
MODES: tuple[OverrideMode, ...] = ("replace", "marked")


@dataclass(frozen=True)
class PromptOverride:
    text: str
    mode: OverrideMode = "replace"

    def to_metadata(self) -> dict[str, str]:
        return {"text": self.text, "mode": self.mode}


def parse_override(value: Any) -> PromptOverride:
    """The override a rollout's metadata holds; ValueError when it is neither a string nor a valid dict."""
    if isinstance(value, str):
        return PromptOverride(value)
    if not isinstance(value, dict):
        raise ValueError(f"a prompt override is a string or {{'text', 'mode'}}, not {type(value).__name__}")
    text, mode = value.get("text"), value.get("mode", "replace")
    if not isinstance(text, str):
        raise ValueError("a prompt override needs a string 'text'")
    if mode not in MODES:
        raise ValueError(f"prompt override mode {mode!r} is not one of {', '.join(MODES)}")
    return PromptOverride(text, mode)


def marked_span(text: str) -> str | None:
    """The text between the first pair of markers, or None when there is none."""
    match = MARKED_SPAN.search(text)
    return None if match is None else match.group(1)


def replace_marked(text: str, replacement: str) -> str:
    """`text` with its first marked span (markers included) replaced."""
    return MARKED_SPAN.sub(lambda _: replacement, text, count=1)


def system_text(message: dict[str, Any]) -> str | None:
    """A message's text content: a string, or its text parts joined."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [part.get("text") for part in content if isinstance(part, dict)]
        return "".join(text for text in texts if isinstance(text, str))
    return None


def apply_prompt_override(body: dict[str, Any], override: Any) -> dict[str, Any]:
    """The chat request with the override applied (see the module docstring)."""
    try:
        parsed = parse_override(override)
    except ValueError as exc:
        raise GatewayError(
            500,
            f"this rollout's prompt override is invalid: {exc}",
            type="server_error",
            code="invalid_prompt_override",
        ) from None
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body
    index = next(
        (i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") in SYSTEM_ROLES), None
    )
    content: Any = parsed.text
    if parsed.mode == "marked":
        content = None if index is None else _replace_marked_content(messages[index].get("content"), content)
        if content is None:
            return body
    out = list(messages)
    if index is None:
        out.insert(0, {"role": "system", "content": content})
    else:
        out[index] = {**messages[index], "content": content}
    return {**body, "messages": out}


def _replace_marked_content(content: Any, text: str) -> Any:
    """Message content (a string, or the first text part that has one) with its first marked span
    replaced; None when it has none."""
    if isinstance(content, str):
        return None if marked_span(content) is None else replace_marked(content, text)
    if not isinstance(content, list):
        return None
    for i, part in enumerate(content):
        part_text = part.get("text") if isinstance(part, dict) else None
        if isinstance(part_text, str) and marked_span(part_text) is not None:
            return [*content[:i], {**part, "text": replace_marked(part_text, text)}, *content[i + 1 :]]
    return None
