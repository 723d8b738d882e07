"""Server-sent events: the bytes of one event, and reading an OpenAI-compatible upstream's stream back
into the whole call it streamed (or the part of it streamed before the agent went away)."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import orjson

from tether.gateway.upstreams.base import CallKind, CallRecord, ChoiceRecord, int_list, logprob_values


class StreamAborted(Exception):
    """Thrown into an upstream's stream, at the event it yielded last, when the agent has gone away. An
    upstream that can answers it by stopping generation and yielding the `CallRecord` of what it has
    generated so far (token ids and logprobs included); one that cannot lets it propagate, and the
    gateway rebuilds the call from the events it relayed."""


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def record_of_events(kind: CallKind, events: list[bytes], policy_version: int | None) -> CallRecord:
    """The call as far as the relayed events tell it (ids and logprobs only where the agent asked)."""
    acc = StreamAccumulator(kind)
    for event in events:
        for data in data_lines(event):
            try:
                chunk = orjson.loads(data)
            except orjson.JSONDecodeError:
                continue
            if isinstance(chunk, dict):
                acc.add(chunk)
    return acc.record(policy_version)


def data_lines(event: bytes) -> list[bytes]:
    return [line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:")]


async def sse_events(pieces: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    """The data of each `data:` line of an event stream, as its events complete."""
    buffer = b""
    async for piece in pieces:
        buffer += piece
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            for data in data_lines(event):
                yield data


class StreamAccumulator:
    """Rebuilds the whole call from stream chunks: text, token ids and logprobs per choice."""

    def __init__(self, kind: CallKind) -> None:
        self.kind = kind
        self.prompt_ids: list[int] | None = None
        self.texts: dict[int, list[str]] = {}
        self.ids: dict[int, list[int] | None] = {}
        self.logprobs: dict[int, list[float] | None] = {}
        self.finish: dict[int, str | None] = {}
        self.tool_calls: dict[int, dict[int, dict[str, Any]]] = {}  # choice -> call index -> call
        self.usage: dict[str, Any] = {}
        self.meta: dict[str, Any] = {}

    def add(self, chunk: dict[str, Any]) -> None:
        for key in ("id", "model", "created"):
            self.meta.setdefault(key, chunk.get(key))
        self.prompt_ids = self.prompt_ids or int_list(chunk.get("prompt_token_ids"))
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            index = choice.get("index", 0)
            self.prompt_ids = self.prompt_ids or int_list(choice.get("prompt_token_ids"))
            delta = choice.get("delta") or {}
            text = delta.get("content") if self.kind == "chat" else choice.get("text")
            self.texts.setdefault(index, []).append(text or "")
            for piece in delta.get("tool_calls") or []:
                self._add_tool_call(index, piece)
            self._extend(self.ids, index, int_list(choice.get("token_ids")))
            self._extend(self.logprobs, index, logprob_values(self.kind, choice.get("logprobs")))
            if choice.get("finish_reason"):
                self.finish[index] = choice["finish_reason"]

    def _add_tool_call(self, choice: int, piece: dict[str, Any]) -> None:
        """Stream chunks carry a tool call in pieces: id, type and name once, arguments in fragments."""
        calls = self.tool_calls.setdefault(choice, {})
        call = calls.setdefault(
            piece.get("index", len(calls)),
            {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
        )
        if piece.get("id"):
            call["id"] = piece["id"]
        if piece.get("type"):
            call["type"] = piece["type"]
        function = piece.get("function") or {}
        call["function"]["name"] += function.get("name") or ""
        call["function"]["arguments"] += function.get("arguments") or ""

    def _message(self, choice: ChoiceRecord) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": choice.text}
        calls = self.tool_calls.get(choice.index)
        if calls:
            message["content"] = choice.text or None
            message["tool_calls"] = [calls[position] for position in sorted(calls)]
        return message

    @staticmethod
    def _extend(target: dict[int, Any], index: int, values: list[Any] | None) -> None:
        if values is None:
            target.setdefault(index, None)
        else:
            target[index] = (target.get(index) or []) + values

    def record(self, policy_version: int | None) -> CallRecord:
        choices = [
            ChoiceRecord(
                index,
                "".join(parts),
                self.finish.get(index),
                self.ids.get(index) or None,
                self.logprobs.get(index) or None,
            )
            for index, parts in sorted(self.texts.items())
        ]
        response = {
            **self.meta,
            "object": "chat.completion" if self.kind == "chat" else "text_completion",
            "choices": [
                {
                    "index": c.index,
                    "finish_reason": c.finish_reason,
                    **({"message": self._message(c)} if self.kind == "chat" else {"text": c.text}),
                }
                for c in choices
            ],
            "usage": self.usage,
        }
        return CallRecord(response, choices, self.prompt_ids, self.usage, policy_version)
