"""Prompt overrides: the gateway puts a candidate system prompt into an agent's chat calls, so that
prompt optimization needs no change to the agent's code."""

from __future__ import annotations

from typing import Any


def apply_prompt_override(body: dict[str, Any], override: Any) -> dict[str, Any]:
    """The chat request with its system message replaced by `override` (inserted when it has none)."""
    if not isinstance(override, str):
        return body
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body
    replaced = False
    out: list[Any] = []
    for message in messages:
        if not replaced and isinstance(message, dict) and message.get("role") in ("system", "developer"):
            out.append({**message, "content": override})
            replaced = True
        else:
            out.append(message)
    if not replaced:
        out.insert(0, {"role": "system", "content": override})
    return {**body, "messages": out}
