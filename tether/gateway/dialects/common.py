"""What the API dialects share: request checks, reading a chat answer, and reading a relayed chat stream.

A dialect call goes through the gateway as a chat completion: the dialect translates the request into a
chat body, the gateway routes, admits, overrides and records it like any chat call, and the dialect
translates the chat answer (or the relayed chat stream, event by event) back.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from tether.gateway.errors import GatewayError
from tether.gateway.upstreams.sse import sse_events


def bad_request(message: str, param: str | None = None) -> GatewayError:
    return GatewayError(400, message, param=param)


def new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


def sse_event(name: str, payload: dict[str, Any]) -> bytes:
    """One server-sent event with its `event:` line, as both the Responses and Messages APIs send."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def check_fields(body: dict[str, Any], supported: Iterable[str], api: str) -> None:
    """Refuse fields this translation does not know, so that nothing an agent asks for is dropped."""
    known = set(supported)
    for name in body:
        if name not in known:
            raise bad_request(f"'{name}' is not supported by the Tether gateway's {api} API", param=name)


def require_default(body: dict[str, Any], name: str, defaults: tuple[Any, ...], why: str) -> None:
    """A field that is accepted only with a value that asks for nothing the gateway cannot do."""
    if name in body and body[name] not in defaults:
        raise bad_request(f"'{name}' is not supported by the Tether gateway: {why}", param=name)


def positive_int(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise bad_request(f"'{name}' must be a positive integer", param=name)
    return value


def expect_dict(value: Any, param: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise bad_request(f"'{param}' must be an object", param=param)
    return value


def expect_list(value: Any, param: str, *, non_empty: bool = False) -> list[Any]:
    if not isinstance(value, list) or (non_empty and not value):
        raise bad_request(f"'{param}' must be a {'non-empty ' if non_empty else ''}list", param=param)
    return value


def expect_dicts(value: Any, param: str, *, non_empty: bool = False) -> Iterator[tuple[dict[str, Any], str]]:
    """The objects of a list, each with its own param (`param[i]`) for the errors about it."""
    for position, item in enumerate(expect_list(value, param, non_empty=non_empty)):
        where = f"{param}[{position}]"
        yield expect_dict(item, where), where


def expect_str(value: Any, param: str) -> str:
    if not isinstance(value, str):
        raise bad_request(f"'{param}' must be a string", param=param)
    return value


def copy_fields(source: dict[str, Any], target: dict[str, Any], names: Iterable[str]) -> None:
    """Copy the named fields that `source` gives (not None) to `target`."""
    for name in names:
        if source.get(name) is not None:
            target[name] = source[name]


def copy_stream(body: dict[str, Any], chat: dict[str, Any]) -> None:
    """A streamed request is made as a streamed chat call, with the usage in its last chunk."""
    if body.get("stream"):
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}


def chat_tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def image_part(url: str, detail: str | None = None) -> dict[str, Any]:
    """A chat content part showing an image (a URL, or a `data:` URL holding its bytes)."""
    image: dict[str, Any] = {"url": url}
    if detail is not None:
        image["detail"] = detail
    return {"type": "image_url", "image_url": image}


def user_content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """A user message's chat content: its text parts joined into one string, as a text-only request
    always was (the prompt, and its tokens, unchanged); with an image, the parts in their order."""
    if all(part["type"] == "text" for part in parts):
        return "\n".join(part["text"] for part in parts)
    return parts


def arguments_text(value: Any, param: str) -> str:
    """Function-call arguments as chat carries them: a JSON string."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return orjson.dumps(value).decode()
    raise bad_request(f"'{param}' must be a JSON string or object", param=param)


# -- the chat answer ----------------------------------------------------------------------------------


@dataclass
class ToolCall:
    call_id: str
    name: str
    arguments: str = ""


@dataclass
class ChatAnswer:
    """The first choice of a chat completion, in the terms the dialects need."""

    text: str
    tool_calls: list[ToolCall]
    finish_reason: str | None
    stop_reason: Any  # vLLM's matched stop string (or token id), when the upstream gives it
    usage: dict[str, Any]
    model: str | None
    created: float | None
    reasoning: str | None = None  # a reasoning model's thinking, when the upstream tells it apart


def reasoning_of(message: dict[str, Any]) -> str | None:
    """A chat message's (or delta's) thinking: `reasoning_content` (DeepSeek's name, vLLM's and Tether's)
    or `reasoning` (newer vLLM's)."""
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str):
            return value
    return None


def _tool_call(item: dict[str, Any], with_arguments: bool = True) -> ToolCall:
    """A chat tool call; without its arguments for the first piece of a streamed one."""
    function = item.get("function") or {}
    arguments = (function.get("arguments") or "") if with_arguments else ""
    return ToolCall(item.get("id") or new_id("call_"), function.get("name") or "", arguments)


def read_chat_answer(response: dict[str, Any]) -> ChatAnswer:
    choices = response.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    content = message.get("content")
    return ChatAnswer(
        text=content if isinstance(content, str) else "",
        tool_calls=[_tool_call(call) for call in message.get("tool_calls") or []],
        finish_reason=choice.get("finish_reason"),
        stop_reason=choice.get("stop_reason"),
        usage=response.get("usage") or {},
        model=response.get("model"),
        created=response.get("created"),
        reasoning=reasoning_of(message),
    )


# -- the relayed chat stream --------------------------------------------------------------------------


class StreamFailed(Exception):
    """The relayed chat stream ended in an error event (its OpenAI-shaped error object)."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error.get("message") or "the stream failed")
        self.error = error


@dataclass
class StreamEnd:
    """What the stream said besides deltas; complete once the deltas are exhausted."""

    finish_reason: str | None = None
    stop_reason: Any = None
    usage: dict[str, Any] = field(default_factory=dict)
    model: str | None = None


async def chat_chunks(body: AsyncIterator[bytes]) -> AsyncIterator[dict[str, Any]]:
    """The chunks of the gateway's chat stream; returns at `[DONE]`, raises StreamFailed on an error event.

    The gateway sends `[DONE]` only once the call is recorded, so a dialect that ends its own stream on
    it keeps the guarantee that an answered call is on disk."""
    async for data in sse_events(body):
        if data == b"[DONE]":
            return
        chunk = orjson.loads(data)
        if isinstance(chunk, dict) and isinstance(chunk.get("error"), dict):
            raise StreamFailed(chunk["error"])
        if isinstance(chunk, dict):
            yield chunk
    raise StreamFailed({"message": "the upstream stream ended without finishing", "type": "upstream_error"})


class EventWriter(Protocol):
    """A dialect's events for each part of a relayed chat stream."""

    def start(self) -> list[bytes]: ...
    def reasoning(self, delta: str) -> list[bytes]: ...
    def text(self, delta: str) -> list[bytes]: ...
    def tool_start(self, call: ToolCall) -> list[bytes]: ...
    def tool_args(self, call: ToolCall, delta: str) -> list[bytes]: ...
    def finish(self, end: StreamEnd) -> list[bytes]: ...
    def fail(self, error: dict[str, Any]) -> list[bytes]: ...


async def write_events(writer: EventWriter, chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """The writer's events for the first choice of a chat stream: its start, one batch for each text or
    tool-call delta, then its finish, or its failure (and nothing more) when the stream ends in an error."""
    for event in writer.start():
        yield event
    end = StreamEnd()
    calls: dict[int, ToolCall] = {}
    try:
        async for chunk in chunks:
            if chunk.get("usage"):
                end.usage = chunk["usage"]
            end.model = end.model or chunk.get("model")
            for choice in chunk.get("choices") or []:
                if choice.get("index", 0) != 0:
                    continue
                delta = choice.get("delta") or {}
                thinking = reasoning_of(delta)
                if thinking:
                    for event in writer.reasoning(thinking):
                        yield event
                if delta.get("content"):
                    for event in writer.text(delta["content"]):
                        yield event
                for item in delta.get("tool_calls") or []:
                    function = item.get("function") or {}
                    index = item.get("index", len(calls))
                    call = calls.get(index)
                    if call is None:
                        call = calls[index] = _tool_call(item, with_arguments=False)
                        for event in writer.tool_start(call):
                            yield event
                    elif function.get("name") and not call.name:
                        call.name = function["name"]
                    if function.get("arguments"):
                        call.arguments += function["arguments"]
                        for event in writer.tool_args(call, function["arguments"]):
                            yield event
                if choice.get("finish_reason"):
                    end.finish_reason = choice["finish_reason"]
                    end.stop_reason = choice.get("stop_reason")
    except StreamFailed as exc:
        for event in writer.fail(exc.error):
            yield event
        return
    for event in writer.finish(end):
        yield event


async def close_quietly(iterator: AsyncIterator[Any]) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()
