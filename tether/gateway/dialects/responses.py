"""OpenAI's Responses API (`POST /v1/responses`) over the gateway's chat-completions path.

Stateless: the gateway keeps no responses, so `previous_response_id`, `store: true`, `background` and the
built-in tools are refused with a 400 that names the field, never dropped.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from tether.gateway.dialects.common import (
    ChatAnswer,
    StreamEnd,
    ToolCall,
    arguments_text,
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

SUPPORTED_FIELDS = (
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "max_output_tokens",
    "temperature",
    "top_p",
    "text",
    "stream",
    "stream_options",
    "metadata",
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "service_tier",
    "store",
    "background",
    "truncation",
    "include",
    "reasoning",
    "previous_response_id",
    "conversation",
    # Hosting hints, with no effect on what the model is asked: accepted and not used.
    "client_metadata",
)
STATELESS = "the gateway keeps no responses; send the whole conversation in 'input'"
STATELESS_FILES = "the gateway keeps no files: a URL, or the image's bytes as a data: URL"
ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
TEXT_PARTS = ("input_text", "output_text", "text", "refusal")
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
VERBOSITIES = (None, "low", "medium", "high")
INCLUDABLE = ("reasoning.encrypted_content",)
# The chat finish reasons that leave a response incomplete, and the reason the response gives.
INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}


# -- request -------------------------------------------------------------------------------------------


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions body that asks the upstream what this Responses request asks."""
    check_fields(body, SUPPORTED_FIELDS, "Responses")
    require_default(body, "previous_response_id", (None,), STATELESS)
    require_default(body, "conversation", (None,), STATELESS)
    require_default(body, "store", (None, False), "it keeps no responses; send 'store': false")
    require_default(body, "background", (None, False), "calls are answered in the foreground")
    require_default(body, "truncation", (None, "disabled"), "the conversation is never truncated")
    _check_include(body.get("include"))
    _check_reasoning(body.get("reasoning"))
    chat: dict[str, Any] = {"model": body.get("model"), "messages": _messages(body)}
    if body.get("tools") is not None:
        chat["tools"] = _tools(body["tools"])
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    max_tokens = positive_int(body, "max_output_tokens")
    if max_tokens is not None:
        chat["max_tokens"] = max_tokens
    copy_fields(body, chat, ("temperature", "top_p", "parallel_tool_calls"))
    response_format = _response_format(body.get("text"))
    if response_format is not None:
        chat["response_format"] = response_format
    copy_stream(body, chat)
    return chat


def _check_include(include: Any) -> None:
    """Extra output data: only `reasoning.encrypted_content`, which is answered with the thinking in the
    clear (a reasoning item's `content`; it has no encrypted form), so a client that keeps reasoning
    items between turns (Codex) sends it back as text."""
    for value, where in ((v, f"include[{i}]") for i, v in enumerate(expect_list(include or [], "include"))):
        if value not in INCLUDABLE:
            raise bad_request(
                f"'{where}' {value!r} is not available from the Tether gateway (available: "
                f"{', '.join(INCLUDABLE)})",
                param=where,
            )


def _check_reasoning(reasoning: Any) -> None:
    """`reasoning` options are accepted as the API defines them; a reasoning model thinks as it was trained
    to (its effort is not set apart: `max_output_tokens` bounds thinking and answer together)."""
    if reasoning is None:
        return
    options = expect_dict(reasoning, "reasoning")
    allowed = {"effort": (None, *REASONING_EFFORTS), "summary": (None, "auto", "concise", "detailed")}
    for name, values in allowed.items():
        if options.get(name) not in values:
            shown = ", ".join(str(v) for v in values[1:])
            raise bad_request(f"'reasoning.{name}' must be one of {shown}", param=f"reasoning.{name}")


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None:
        messages.append({"role": "system", "content": expect_str(instructions, "instructions")})
    raw = body.get("input")
    if isinstance(raw, str):
        messages.append({"role": "user", "content": raw})
        return messages
    for item, where in expect_dicts(raw, "input", non_empty=True):
        _add_item(messages, item, where)
    return messages


def _add_item(messages: list[dict[str, Any]], item: dict[str, Any], param: str) -> None:
    kind = item.get("type", "message")
    if kind == "message":
        role = ROLES.get(item.get("role"))  # type: ignore[arg-type]
        if role is None:
            raise bad_request(f"'{param}.role' must be one of {', '.join(ROLES)}", param=f"{param}.role")
        content = item.get("content")
        where = f"{param}.content"
        text = _user(content, where) if role == "user" else _text(content, where)
        last = messages[-1] if messages else None
        if role == "assistant" and last is not None and _thinking_only(last):
            last["content"] = text  # the answer that followed that thinking
        else:
            messages.append({"role": role, "content": text})
    elif kind == "reasoning":
        messages.append(
            {"role": "assistant", "content": None, "reasoning_content": _reasoning_text(item, param)}
        )
    elif kind == "function_call":
        call = chat_tool_call(
            expect_str(item.get("call_id"), f"{param}.call_id"),
            expect_str(item.get("name"), f"{param}.name"),
            arguments_text(item.get("arguments", ""), f"{param}.arguments"),
        )
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant":
            last.setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        messages.append(
            {
                "role": "tool",
                "tool_call_id": expect_str(item.get("call_id"), f"{param}.call_id"),
                "content": _text(item.get("output"), f"{param}.output"),
            }
        )
    else:
        raise bad_request(
            f"input items of type {kind!r} are not supported by the Tether gateway "
            "(supported: message, reasoning, function_call, function_call_output)",
            param=f"{param}.type",
        )


def _thinking_only(message: dict[str, Any]) -> bool:
    """A reasoning item's message that no answer or call has joined yet."""
    return "reasoning_content" in message and message.get("content") is None and not message.get("tool_calls")


def _reasoning_text(item: dict[str, Any], param: str) -> str:
    """A reasoning item's thinking: its `content` texts, else its summary's (encrypted content is another
    provider's and has no text)."""
    for key in ("content", "summary"):
        parts = item.get(key) or []
        texts = [
            expect_str(part.get("text"), f"{where}.text")
            for part, where in expect_dicts(parts, f"{param}.{key}")
        ]
        if texts:
            return "\n".join(texts)
    return ""


def _user(content: Any, param: str) -> str | list[dict[str, Any]]:
    """A user message's content: its text, or with images (`input_image`), its parts in order."""
    if isinstance(content, str):
        return content
    parts = []
    for part, where in expect_dicts(content, param):
        if part.get("type") == "input_image":
            if part.get("image_url") is None:
                raise bad_request(
                    f"an input_image needs an 'image_url' ({STATELESS_FILES})", f"{where}.image_url"
                )
            parts.append(image_part(expect_str(part["image_url"], f"{where}.image_url"), part.get("detail")))
        else:
            parts.append({"type": "text", "text": _part_text(part, where)})
    return user_content(parts)


def _text(content: Any, param: str) -> str:
    """Message content as one string: a string, or text parts joined by newlines."""
    if isinstance(content, str):
        return content
    return "\n".join(_part_text(part, where) for part, where in expect_dicts(content, param))


def _part_text(part: dict[str, Any], param: str) -> str:
    if part.get("type") not in TEXT_PARTS:
        raise bad_request(
            f"content parts of type {part.get('type')!r} are not supported here by the Tether gateway "
            "(text; and images in user messages)",
            param=f"{param}.type",
        )
    text = part.get("refusal") if part.get("type") == "refusal" else part.get("text")
    return expect_str(text, f"{param}.text")


def _tools(tools: Any) -> list[dict[str, Any]]:
    out = []
    for tool, where in expect_dicts(tools, "tools"):
        if tool.get("type") != "function":
            raise bad_request(
                f"tools of type {tool.get('type')!r} (built-in tools) are not supported by the Tether "
                "gateway; only 'function' tools",
                param=f"{where}.type",
            )
        function: dict[str, Any] = {"name": expect_str(tool.get("name"), f"{where}.name")}
        copy_fields(tool, function, ("description", "parameters", "strict"))
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": expect_str(choice.get("name"), "tool_choice.name")}}
    raise bad_request(
        "'tool_choice' must be 'auto', 'none', 'required' or {'type': 'function', 'name': ...}",
        param="tool_choice",
    )


def _response_format(text: Any) -> dict[str, Any] | None:
    """The chat form of `text.format`. `text.verbosity` (which the Agents SDK sends for its default model)
    is accepted as the API defines it, as `reasoning.effort` is: the policy answers as it was trained to."""
    if text is None:
        return None
    config = expect_dict(text, "text")
    for key in config:
        if key not in ("format", "verbosity"):
            raise bad_request(f"'text.{key}' is not supported by the Tether gateway", param=f"text.{key}")
    if config.get("verbosity") not in VERBOSITIES:
        raise bad_request("'text.verbosity' must be one of low, medium, high", param="text.verbosity")
    fmt = config.get("format")
    if fmt is None:
        return None
    fmt = expect_dict(fmt, "text.format")
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema = {"name": expect_str(fmt.get("name"), "text.format.name"), "schema": fmt.get("schema")}
        copy_fields(fmt, schema, ("strict", "description"))
        return {"type": "json_schema", "json_schema": schema}
    raise bad_request(
        "'text.format.type' must be 'text', 'json_object' or 'json_schema'", param="text.format.type"
    )


# -- answer --------------------------------------------------------------------------------------------


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def _reasoning_item(item_id: str, text: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }


def _call_item(item_id: str, call: ToolCall, status: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "function_call",
        "call_id": call.call_id,
        "name": call.name,
        "arguments": call.arguments,
        "status": status,
    }


def _usage(usage: dict[str, Any]) -> dict[str, Any]:
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": int(usage.get("total_tokens") or prompt + completion),
    }


def _envelope(
    request: dict[str, Any], response_id: str, created: float, model: str | None, status: str
) -> dict[str, Any]:
    """The Response object around an output: what the request asked, echoed as the API does."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "model": model or request.get("model"),
        "output": [],
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "previous_response_id": None,
        "reasoning": None,
        "store": False,
        "temperature": request.get("temperature"),
        "text": request.get("text") or {"format": {"type": "text"}},
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": request.get("tools") or [],
        "top_p": request.get("top_p"),
        "truncation": "disabled",
        "usage": None,
        "metadata": request.get("metadata") or {},
    }


def _finish(envelope: dict[str, Any], output: list[dict[str, Any]], finish_reason: str | None) -> None:
    envelope["output"] = output
    reason = INCOMPLETE_REASONS.get(finish_reason or "")
    envelope["status"] = "completed" if reason is None else "incomplete"
    if reason is not None:
        envelope["incomplete_details"] = {"reason": reason}


def from_chat(response: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    answer: ChatAnswer = read_chat_answer(response)
    done = "incomplete" if answer.finish_reason == "length" else "completed"
    output = [_reasoning_item(new_id("rs_"), answer.reasoning)] if answer.reasoning else []
    if answer.text or not answer.tool_calls:
        output.append(_message_item(new_id("msg_"), answer.text, done))
    output += [_call_item(new_id("fc_"), call, "completed") for call in answer.tool_calls]
    envelope = _envelope(request, new_id("resp_"), answer.created or time.time(), answer.model, done)
    _finish(envelope, output, answer.finish_reason)
    envelope["usage"] = _usage(answer.usage)
    return envelope


# -- stream --------------------------------------------------------------------------------------------


@dataclass
class _OpenItem:
    output_index: int
    item_id: str
    call: ToolCall | None = None  # None: a message or a reasoning item
    text: list[str] = field(default_factory=list)
    reasoning: bool = False
    done: dict[str, Any] | None = None  # the item as closed (a reasoning item closes when the answer starts)


class _ResponseStream:
    """Turns the text and tool-call deltas of a chat stream into the Responses event sequence."""

    def __init__(self, request: dict[str, Any]) -> None:
        self.request = request
        self.sequence = 0
        self.items: list[_OpenItem] = []
        self.by_call: dict[int, _OpenItem] = {}
        self.envelope = _envelope(request, new_id("resp_"), time.time(), None, "in_progress")

    def event(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return sse_event(kind, payload)

    def item_event(self, kind: str, item: _OpenItem, **fields: Any) -> bytes:
        return self.event(kind, item_id=item.item_id, output_index=item.output_index, **fields)

    def start(self) -> list[bytes]:
        return [
            self.event("response.created", response=self.envelope),
            self.event("response.in_progress", response=self.envelope),
        ]

    def reasoning(self, delta: str) -> list[bytes]:
        events: list[bytes] = []
        current = self.items[-1] if self.items else None
        if current is None or not current.reasoning:
            current = _OpenItem(len(self.items), new_id("rs_"), reasoning=True)
            self.items.append(current)
            added = {**_reasoning_item(current.item_id, ""), "content": []}
            events.append(
                self.event("response.output_item.added", output_index=current.output_index, item=added)
            )
        current.text.append(delta)
        events.append(self.item_event("response.reasoning_text.delta", current, content_index=0, delta=delta))
        return events

    def text(self, delta: str) -> list[bytes]:
        events: list[bytes] = []
        current = self.items[-1] if self.items else None
        if current is not None and current.reasoning and current.done is None:
            self._close(current, "completed", events)
        if current is None or current.call is not None or current.reasoning:
            current = self._open_message(events)
        current.text.append(delta)
        events.append(
            self.item_event("response.output_text.delta", current, content_index=0, delta=delta, logprobs=[])
        )
        return events

    def _open_message(self, events: list[bytes]) -> _OpenItem:
        item = _OpenItem(len(self.items), new_id("msg_"))
        self.items.append(item)
        message = _message_item(item.item_id, "", "in_progress")
        part = message["content"].pop()
        events.append(self.event("response.output_item.added", output_index=item.output_index, item=message))
        events.append(self.item_event("response.content_part.added", item, content_index=0, part=part))
        return item

    def tool_start(self, call: ToolCall) -> list[bytes]:
        events: list[bytes] = []
        current = self.items[-1] if self.items else None
        if current is not None and current.reasoning and current.done is None:
            self._close(current, "completed", events)
        item = _OpenItem(len(self.items), new_id("fc_"), call)
        self.items.append(item)
        self.by_call[id(call)] = item
        added = _call_item(item.item_id, ToolCall(call.call_id, call.name), "in_progress")
        return [*events, self.event("response.output_item.added", output_index=item.output_index, item=added)]

    def tool_args(self, call: ToolCall, delta: str) -> list[bytes]:
        item = self.by_call[id(call)]
        return [self.item_event("response.function_call_arguments.delta", item, delta=delta)]

    def finish(self, end: StreamEnd) -> list[bytes]:
        events: list[bytes] = []
        if not any(item.call is None and not item.reasoning for item in self.items) and not self.by_call:
            self._open_message(events)  # an answer has a message, if only an empty one
        status = "incomplete" if end.finish_reason == "length" else "completed"
        output = [self._close(item, status, events) for item in self.items]
        self.envelope["model"] = end.model or self.envelope["model"]
        _finish(self.envelope, output, end.finish_reason)
        self.envelope["usage"] = _usage(end.usage)
        final = "response.completed" if self.envelope["status"] == "completed" else "response.incomplete"
        events.append(self.event(final, response=self.envelope))
        return events

    def _close(self, item: _OpenItem, status: str, events: list[bytes]) -> dict[str, Any]:
        if item.done is not None:
            return item.done
        if item.reasoning:
            done = _reasoning_item(item.item_id, "".join(item.text))
            text = done["content"][0]["text"]
            events.append(self.item_event("response.reasoning_text.done", item, content_index=0, text=text))
        elif item.call is not None:
            done = _call_item(item.item_id, item.call, "completed")
            arguments = done["arguments"]
            events.append(self.item_event("response.function_call_arguments.done", item, arguments=arguments))
        else:
            done = _message_item(item.item_id, "".join(item.text), status)
            part = done["content"][0]
            text = part["text"]
            events.append(
                self.item_event("response.output_text.done", item, content_index=0, text=text, logprobs=[])
            )
            events.append(self.item_event("response.content_part.done", item, content_index=0, part=part))
        events.append(self.event("response.output_item.done", output_index=item.output_index, item=done))
        item.done = done
        return done

    def fail(self, error: dict[str, Any]) -> list[bytes]:
        message = error.get("message") or "the model call failed"
        self.envelope["status"] = "failed"
        self.envelope["error"] = {"code": "server_error", "message": message}
        return [
            self.event("error", code=error.get("code"), message=message, param=error.get("param")),
            self.event("response.failed", response=self.envelope),
        ]


def stream(chunks: AsyncIterator[dict[str, Any]], request: dict[str, Any]) -> AsyncIterator[bytes]:
    return write_events(_ResponseStream(request), chunks)
