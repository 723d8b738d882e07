"""Anthropic's Messages API (`POST /v1/messages`) over the gateway's chat-completions path.

Text, images (in user turns: forwarded to the upstream as chat image parts), tool use and extended
thinking (a reasoning model's thinking as `thinking` blocks, its earlier thinking sent back as the chat
message's `reasoning_content`); documents, server tools and `top_k` are refused with a 400 that names the
field. Errors come in Anthropic's shape, `{"type": "error", "error": {type, message}}`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.responses import Response

from tether.gateway.dialects.common import (
    StreamEnd,
    ToolCall,
    bad_request,
    chat_tool_call,
    check_fields,
    copy_fields,
    copy_stream,
    expect_dict,
    expect_dicts,
    expect_list,
    expect_str,
    image_part,
    new_id,
    positive_int,
    read_chat_answer,
    require_default,
    sse_event,
    user_content,
    write_events,
)
from tether.gateway.errors import GatewayError

SUPPORTED_FIELDS = (
    "model",
    "messages",
    "system",
    "max_tokens",
    "tools",
    "tool_choice",
    "stop_sequences",
    "temperature",
    "top_p",
    "stream",
    "thinking",
    # Hosting hints, with no effect on what the model is asked: accepted and not used.
    "metadata",
    "service_tier",
    "cache_control",
    "inference_geo",
    "speed",
)
# An argument string the model wrote that is not a JSON object still reaches the agent, under this key.
UNPARSED_ARGUMENTS = "_unparsed_arguments"
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}
TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
THINKING_TYPES = ("enabled", "disabled", "adaptive")
STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}


# -- request -------------------------------------------------------------------------------------------


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions body that asks the upstream what this Messages request asks."""
    check_fields(body, SUPPORTED_FIELDS, "Messages")
    _check_thinking(body.get("thinking"))
    max_tokens = positive_int(body, "max_tokens")
    if max_tokens is None:
        raise bad_request("'max_tokens' is required", param="max_tokens")
    messages = _system(body.get("system"))
    for message, where in expect_dicts(body.get("messages"), "messages", non_empty=True):
        _add_message(messages, message, where)
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages, "max_tokens": max_tokens}
    if body.get("tools") is not None:
        chat["tools"] = _tools(body["tools"])
    if body.get("tool_choice") is not None:
        _tool_choice(expect_dict(body["tool_choice"], "tool_choice"), chat)
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(stop, str) for stop in stops):
            raise bad_request("'stop_sequences' must be a list of strings", param="stop_sequences")
        if stops:
            chat["stop"] = stops
    copy_fields(body, chat, ("temperature", "top_p"))
    copy_stream(body, chat)
    return chat


def _check_thinking(thinking: Any) -> None:
    """`thinking` is accepted as Anthropic defines it; a reasoning model thinks as it was trained to (the
    budget is not enforced apart: `max_tokens` bounds thinking and answer together)."""
    if thinking is None:
        return
    kind = expect_dict(thinking, "thinking").get("type")
    if kind not in THINKING_TYPES:
        raise bad_request(f"'thinking.type' must be one of {', '.join(THINKING_TYPES)}", "thinking.type")
    budget = thinking.get("budget_tokens")
    if kind == "enabled" and (not isinstance(budget, int) or isinstance(budget, bool) or budget < 1):
        raise bad_request("'thinking.budget_tokens' must be a positive integer", "thinking.budget_tokens")


def _system(system: Any) -> list[dict[str, Any]]:
    if system in (None, "", []):
        return []
    return [{"role": "system", "content": _result_text(system, "system")}]


def _block_text(block: Any, param: str) -> str:
    block = expect_dict(block, param)
    if block.get("type") != "text":
        raise bad_request(
            f"content blocks of type {block.get('type')!r} are not supported here by the Tether gateway "
            "(only text)",
            param=f"{param}.type",
        )
    return expect_str(block.get("text"), f"{param}.text")


def _add_message(messages: list[dict[str, Any]], message: dict[str, Any], param: str) -> None:
    role = message.get("role")
    if role not in ("user", "assistant"):
        raise bad_request(f"'{param}.role' must be 'user' or 'assistant'", param=f"{param}.role")
    content = message.get("content")
    if isinstance(content, str):
        messages.append({"role": role, "content": content})
        return
    if role == "assistant":
        messages.append(_assistant(content, f"{param}.content"))
    else:
        messages.extend(_user(content, f"{param}.content"))


def _assistant(blocks: Any, param: str) -> dict[str, Any]:
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block, where in expect_dicts(blocks, param):
        if block.get("type") == "thinking":
            thoughts.append(expect_str(block.get("thinking"), f"{where}.thinking"))
        elif block.get("type") == "redacted_thinking":
            continue  # another provider's encrypted thinking: there is no text to give the model
        elif block.get("type") == "tool_use":
            arguments = block.get("input", {})
            calls.append(
                chat_tool_call(
                    expect_str(block.get("id"), f"{where}.id"),
                    expect_str(block.get("name"), f"{where}.name"),
                    orjson.dumps(expect_dict(arguments, f"{where}.input")).decode(),
                )
            )
        else:
            texts.append(_block_text(block, where))
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if thoughts:
        message["reasoning_content"] = "\n".join(thoughts)
    if calls:
        message["tool_calls"] = calls
    return message


def _user(blocks: Any, param: str) -> list[dict[str, Any]]:
    """Tool results become `tool` messages (first, as they answer the previous turn), the rest one user
    message."""
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block, where in expect_dicts(blocks, param):
        if block.get("type") == "tool_result":
            results.append(
                {
                    "role": "tool",
                    "tool_call_id": expect_str(block.get("tool_use_id"), f"{where}.tool_use_id"),
                    "content": _result_text(block.get("content", ""), f"{where}.content"),
                }
            )
        elif block.get("type") == "image":
            parts.append(_image(block, where))
        else:
            parts.append({"type": "text", "text": _block_text(block, where)})
    if parts or not results:
        results.append({"role": "user", "content": user_content(parts)})
    return results


def _image(block: dict[str, Any], param: str) -> dict[str, Any]:
    """An image block as a chat image part: its base64 bytes as a `data:` URL, or its URL."""
    source = expect_dict(block.get("source"), f"{param}.source")
    if source.get("type") == "base64":
        media = expect_str(source.get("media_type"), f"{param}.source.media_type")
        return image_part(f"data:{media};base64,{expect_str(source.get('data'), f'{param}.source.data')}")
    if source.get("type") == "url":
        return image_part(expect_str(source.get("url"), f"{param}.source.url"))
    raise bad_request(
        f"image sources of type {source.get('type')!r} are not supported by the Tether gateway "
        "(supported: base64, url)",
        param=f"{param}.source.type",
    )


def _result_text(content: Any, param: str) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(
        _block_text(block, f"{param}[{i}]") for i, block in enumerate(expect_list(content, param))
    )


def _tools(tools: Any) -> list[dict[str, Any]]:
    out = []
    for tool, where in expect_dicts(tools, "tools"):
        if tool.get("type") not in (None, "custom"):
            raise bad_request(
                f"tools of type {tool.get('type')!r} (server or built-in tools) are not supported by the "
                "Tether gateway; only client tools with an 'input_schema'",
                param=f"{where}.type",
            )
        function: dict[str, Any] = {
            "name": expect_str(tool.get("name"), f"{where}.name"),
            "parameters": expect_dict(tool.get("input_schema"), f"{where}.input_schema"),
        }
        copy_fields(tool, function, ("description",))
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: dict[str, Any], chat: dict[str, Any]) -> None:
    kind = choice.get("type")
    if isinstance(kind, str) and kind in TOOL_CHOICES:
        chat["tool_choice"] = TOOL_CHOICES[kind]
    elif kind == "tool":
        name = expect_str(choice.get("name"), "tool_choice.name")
        chat["tool_choice"] = {"type": "function", "function": {"name": name}}
    else:
        raise bad_request("'tool_choice.type' must be 'auto', 'any', 'tool' or 'none'", "tool_choice.type")
    if choice.get("disable_parallel_tool_use"):
        chat["parallel_tool_calls"] = False
    require_default(choice, "disable_parallel_tool_use", (None, True, False), "it must be a boolean")


# -- answer --------------------------------------------------------------------------------------------


def tool_input(arguments: str) -> dict[str, Any]:
    """A tool call's arguments as the `input` object; text that is not a JSON object is kept, not lost."""
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {UNPARSED_ARGUMENTS: arguments}


def signature(thinking: str) -> str:
    """A thinking block's `signature`: clients send it back unchanged; the gateway does not check it (the
    thinking is the model's own text, rendered again by its chat template)."""
    return "tether-" + hashlib.sha256(thinking.encode()).hexdigest()[:32]


def _tool_block(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": call.call_id, "name": call.name, "input": tool_input(call.arguments)}


def _stop(
    finish_reason: str | None, stop_reason: Any, request: dict[str, Any], tools: bool
) -> tuple[str, Any]:
    """Anthropic's stop reason and matched stop sequence (known when the upstream names it, as vLLM does)."""
    if tools:
        return "tool_use", None
    if (
        finish_reason == "stop"
        and isinstance(stop_reason, str)
        and stop_reason in (request.get("stop_sequences") or [])
    ):
        return "stop_sequence", stop_reason
    return STOP_REASONS.get(finish_reason or "stop", "end_turn"), None


def _usage(usage: dict[str, Any]) -> dict[str, int]:
    return {
        "input_tokens": int(usage.get("prompt_tokens") or 0),
        "output_tokens": int(usage.get("completion_tokens") or 0),
    }


def from_chat(response: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    answer = read_chat_answer(response)
    content: list[dict[str, Any]] = []
    if answer.reasoning:
        content.append(
            {"type": "thinking", "thinking": answer.reasoning, "signature": signature(answer.reasoning)}
        )
    if answer.text or not answer.tool_calls:
        content.append({"type": "text", "text": answer.text})
    content += [_tool_block(call) for call in answer.tool_calls]
    stop = _stop(answer.finish_reason, answer.stop_reason, request, bool(answer.tool_calls))
    return _message(answer.model or request.get("model"), content, stop, _usage(answer.usage))


def _message(
    model: Any, content: list[dict[str, Any]], stop: tuple[Any, Any], usage: dict[str, int]
) -> dict[str, Any]:
    """A Message: the whole answer, or (with no content or stop reason yet) a stream's start."""
    return {
        "id": new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop[0],
        "stop_sequence": stop[1],
        "usage": usage,
    }


# -- stream --------------------------------------------------------------------------------------------


def _event(kind: str, **fields: Any) -> bytes:
    return sse_event(kind, {"type": kind, **fields})


class _MessageStream:
    """Turns the deltas of a chat stream into Anthropic's stream events. A tool call's input is sent whole
    when its block closes (at the end), checked first: clients parse every partial input as JSON."""

    def __init__(self, request: dict[str, Any]) -> None:
        self.request = request
        self.blocks: list[ToolCall | None] = []  # None: a text or thinking block
        self.open_text: int | None = None
        self.open_thinking: int | None = None
        self.thinking: list[str] = []
        self.had_text = False

    def start(self) -> list[bytes]:
        message = _message(
            self.request.get("model"), [], (None, None), {"input_tokens": 0, "output_tokens": 0}
        )
        return [_event("message_start", message=message)]

    def reasoning(self, delta: str) -> list[bytes]:
        events: list[bytes] = []
        if self.open_thinking is None:
            self._close_text(events)
            block = {"type": "thinking", "thinking": "", "signature": ""}
            self.open_thinking = self._open(None, block, events)
        self.thinking.append(delta)
        delta_event = {"type": "thinking_delta", "thinking": delta}
        events.append(_event("content_block_delta", index=self.open_thinking, delta=delta_event))
        return events

    def _close_thinking(self, events: list[bytes]) -> None:
        if self.open_thinking is not None:
            delta = {"type": "signature_delta", "signature": signature("".join(self.thinking))}
            events.append(_event("content_block_delta", index=self.open_thinking, delta=delta))
            events.append(_event("content_block_stop", index=self.open_thinking))
            self.open_thinking = None
            self.thinking = []

    def text(self, delta: str) -> list[bytes]:
        events: list[bytes] = []
        self._close_thinking(events)
        self.had_text = True
        if self.open_text is None:
            self.open_text = self._open(None, {"type": "text", "text": ""}, events)
        delta_event = {"type": "text_delta", "text": delta}
        events.append(_event("content_block_delta", index=self.open_text, delta=delta_event))
        return events

    def tool_start(self, call: ToolCall) -> list[bytes]:
        events: list[bytes] = []
        self._close_thinking(events)
        self._close_text(events)
        self._open(call, {"type": "tool_use", "id": call.call_id, "name": call.name, "input": {}}, events)
        return events

    def tool_args(self, call: ToolCall, delta: str) -> list[bytes]:
        return []  # the arguments accumulate on the call, and are sent when its block closes

    def _open(self, call: ToolCall | None, block: dict[str, Any], events: list[bytes]) -> int:
        index = len(self.blocks)
        self.blocks.append(call)
        events.append(_event("content_block_start", index=index, content_block=block))
        return index

    def _close_text(self, events: list[bytes]) -> None:
        if self.open_text is not None:
            events.append(_event("content_block_stop", index=self.open_text))
            self.open_text = None

    def finish(self, end: StreamEnd) -> list[bytes]:
        events: list[bytes] = []
        self._close_thinking(events)
        if not self.had_text and not any(call is not None for call in self.blocks):
            events += self.text("")  # an answer has a text block, if only an empty one
        self._close_text(events)
        for index, call in enumerate(self.blocks):
            if call is None:
                continue
            partial = orjson.dumps(tool_input(call.arguments)).decode()
            delta = {"type": "input_json_delta", "partial_json": partial}
            events.append(_event("content_block_delta", index=index, delta=delta))
            events.append(_event("content_block_stop", index=index))
        tools = any(call is not None for call in self.blocks)
        stop_reason, stop_sequence = _stop(end.finish_reason, end.stop_reason, self.request, tools)
        delta = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
        events.append(_event("message_delta", delta=delta, usage=_usage(end.usage)))
        events.append(_event("message_stop"))
        return events

    def fail(self, error: dict[str, Any]) -> list[bytes]:
        return [_event("error", error=_error_object(error.get("message") or "the model call failed", 500))]


def stream(chunks: AsyncIterator[dict[str, Any]], request: dict[str, Any]) -> AsyncIterator[bytes]:
    return write_events(_MessageStream(request), chunks)


def _error_object(message: str, status: int) -> dict[str, str]:
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": kind, "message": message}


def error_body(error: GatewayError) -> dict[str, Any]:
    # Anthropic's errors have no `param`: the message names the field, as Anthropic's own do.
    message = error.message
    if error.param and error.param not in message:
        message = f"{error.param}: {message}"
    return {"type": "error", "error": _error_object(message, error.status)}


def error_response(error: GatewayError) -> Response:
    return Response(
        orjson.dumps(error_body(error)),
        status_code=error.status,
        media_type="application/json",
        headers=error.headers,
    )
