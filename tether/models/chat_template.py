"""A model's chat template as token ids, without loading the model: the prompt the built-in engine would
give the policy for a chat request (the same rendering as `TransformersEngine.chat_prompt_ids`), and the
tokens the policy would have to generate to give a recorded answer (content and tool calls, in the
template's own tool format or the fallback one of `tether.models.tools`).

This is how another model's text (a teacher's, a hosted API's) becomes a training sample for the policy:
the recorded messages are rendered with the policy's template, never with the other model's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tether.models.tools import prepare_messages, template_supports_tools


class TemplateError(ValueError):
    """A recorded call that the chat template cannot turn into a prompt and a reply."""


class ChatTemplate:
    """`ChatTemplate(tokenizer)` or `ChatTemplate.for_model("smollm2-135m")`."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.native_tools = template_supports_tools(tokenizer.chat_template)
        eos = tokenizer.eos_token_id
        self.eos_token_id: int | None = eos if isinstance(eos, int) else None

    @classmethod
    def for_model(cls, model: str, cache_dir: Path | None = None) -> ChatTemplate:
        from transformers import AutoTokenizer

        from tether.models.catalog import resolve_model

        return cls(AutoTokenizer.from_pretrained(resolve_model(model, cache_dir)))

    def _render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        tool_choice: Any,
        *,
        generation_prompt: bool,
        tokenize: bool,
    ) -> Any:
        prepared = prepare_messages(messages, tools, tool_choice, native=self.native_tools)
        kwargs: dict[str, Any] = {"add_generation_prompt": generation_prompt, "tokenize": tokenize}
        if tools and self.native_tools:
            kwargs["tools"] = tools
        return self.tokenizer.apply_chat_template(prepared, **kwargs)

    def prompt_ids(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = None,
    ) -> list[int]:
        """The prompt's token ids, generation prompt included."""
        rendered = self._render(messages, tools, tool_choice, generation_prompt=True, tokenize=True)
        return _as_id_list(rendered)

    def reply_ids(
        self,
        messages: list[dict[str, Any]],
        reply: dict[str, Any],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = None,
    ) -> list[int]:
        """The tokens that follow the prompt when the assistant answers `reply` (an OpenAI assistant
        message), up to and including the end-of-turn token."""
        try:
            prompt = self._render(messages, tools, tool_choice, generation_prompt=True, tokenize=False)
            full = self._render(
                [*messages, {**reply, "role": "assistant"}],
                tools,
                tool_choice,
                generation_prompt=False,
                tokenize=False,
            )
        except ValueError as exc:
            raise TemplateError(f"the chat template cannot render the call: {exc}") from None
        if not isinstance(full, str) or not isinstance(prompt, str) or not full.startswith(prompt):
            raise TemplateError("the chat template renders the answered conversation with another prefix")
        ids = list(self.tokenizer.encode(full[len(prompt) :], add_special_tokens=False))
        if self.eos_token_id is not None and self.eos_token_id in ids:
            ids = ids[: ids.index(self.eos_token_id) + 1]  # what follows the end of turn is the next turn's
        if not ids:
            raise TemplateError("the recorded answer renders to no tokens")
        return ids


def _as_id_list(rendered: Any) -> list[int]:
    if hasattr(rendered, "keys"):  # a dict, or transformers' BatchEncoding
        rendered = rendered["input_ids"]
    ids = list(rendered)
    if ids and isinstance(ids[0], list):
        ids = ids[0]
    return [int(token) for token in ids]
