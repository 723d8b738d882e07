"""A scripted OpenAI chat-completions server on loopback: it plays the model's turns from a script.

The tiny test model cannot decide to call a tool, so the integration tests script the model instead:
each request gets the next turn (plain text, or tool calls), answered like a vLLM server started with
token ids enabled: `prompt_token_ids` on the response, `token_ids` on each choice (or each stream
chunk) and logprobs. Token ids are the UTF-8 bytes of the rendered prompt and of the answer, so a test
can check exactly what the gateway recorded. Every request is kept, with the ids it was given.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

TOKEN_LOGPROB = -0.25


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]
    id: str = ""


@dataclass(frozen=True)
class Turn:
    """One model turn: text, or tool calls (with optional text before them)."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.tool_calls else "stop"


def say(text: str) -> Turn:
    return Turn(text=text)


def call_tool(name: str, **arguments: Any) -> Turn:
    return Turn(tool_calls=(ToolCall(name, arguments),))


@dataclass
class Exchange:
    """One request the server answered, with the ids it reported for it."""

    body: dict[str, Any]
    turn: Turn
    prompt_token_ids: list[int]
    token_ids: list[int]


@dataclass
class Script:
    turns: list[Turn]
    exchanges: list[Exchange] = field(default_factory=list)

    @property
    def requests(self) -> list[dict[str, Any]]:
        return [exchange.body for exchange in self.exchanges]

    def next_turn(self) -> Turn | None:
        position = len(self.exchanges)
        return self.turns[position] if position < len(self.turns) else None


def byte_ids(text: str) -> list[int]:
    return list(text.encode())


def render_prompt(body: dict[str, Any]) -> str:
    """A stable text form of the request's messages and tools (what a chat template would render)."""
    return json.dumps({"messages": body.get("messages"), "tools": body.get("tools")}, sort_keys=True)


def _call_id(turn_index: int, call_index: int, call: ToolCall) -> str:
    return call.id or f"call_{turn_index}_{call_index}"


def _wire_tool_calls(turn_index: int, turn: Turn) -> list[dict[str, Any]]:
    return [
        {
            "id": _call_id(turn_index, i, call),
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
        }
        for i, call in enumerate(turn.tool_calls)
    ]


def _pieces(turn_index: int, turn: Turn) -> list[tuple[dict[str, Any], str]]:
    """The answer as (delta, generated text) pieces: words of the text, then one piece per tool call."""
    pieces: list[tuple[dict[str, Any], str]] = []
    words = turn.text.split(" ")
    for i, word in enumerate(words if turn.text else []):
        piece = word if i == len(words) - 1 else word + " "
        pieces.append(({"content": piece}, piece))
    for i, call in enumerate(_wire_tool_calls(turn_index, turn)):
        delta = {"tool_calls": [{"index": i, **call}]}
        pieces.append((delta, json.dumps(call["function"])))
    return pieces


def _logprobs(ids: Sequence[int]) -> dict[str, Any]:
    return {
        "content": [
            {"token": chr(i), "logprob": TOKEN_LOGPROB, "bytes": [i], "top_logprobs": []} for i in ids
        ]
    }


def _usage(prompt_ids: list[int], ids: list[int]) -> dict[str, int]:
    return {
        "prompt_tokens": len(prompt_ids),
        "completion_tokens": len(ids),
        "total_tokens": len(prompt_ids) + len(ids),
    }


def create_scripted_upstream(script: Script) -> Starlette:
    async def chat(request: Request) -> Response:
        body = await request.json()
        turn = script.next_turn()
        if turn is None:
            error = {"message": f"the script has only {len(script.turns)} turns", "type": "invalid_request"}
            return JSONResponse({"error": error}, status_code=400)
        turn_index = len(script.exchanges)
        pieces = _pieces(turn_index, turn)
        prompt_ids = byte_ids(render_prompt(body))
        ids = [token for _, text in pieces for token in byte_ids(text)]
        script.exchanges.append(Exchange(body, turn, prompt_ids, ids))
        with_ids = bool(body.get("return_token_ids"))
        if body.get("stream"):
            events = _stream(body, turn, pieces, prompt_ids, with_ids)
            return StreamingResponse(events, media_type="text/event-stream")
        return JSONResponse(_completion(body, turn_index, turn, prompt_ids, ids, with_ids))

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def _completion(
    body: dict[str, Any], turn_index: int, turn: Turn, prompt_ids: list[int], ids: list[int], with_ids: bool
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
    if turn.tool_calls:
        message["tool_calls"] = _wire_tool_calls(turn_index, turn)
    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "finish_reason": turn.finish_reason,
        "logprobs": _logprobs(ids) if body.get("logprobs") else None,
    }
    response: dict[str, Any] = {
        "id": f"chatcmpl-script-{turn_index}",
        "object": "chat.completion",
        "created": 1,
        "model": body.get("model"),
        "choices": [choice],
        "usage": _usage(prompt_ids, ids),
    }
    if with_ids:
        choice["token_ids"] = ids
        response["prompt_token_ids"] = prompt_ids
    return response


async def _stream(
    body: dict[str, Any],
    turn: Turn,
    pieces: list[tuple[dict[str, Any], str]],
    prompt_ids: list[int],
    with_ids: bool,
) -> AsyncIterator[str]:
    head = {
        "id": "chatcmpl-script",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": body.get("model"),
    }
    first: dict[str, Any] = {
        **head,
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
    }
    if with_ids:
        first["prompt_token_ids"] = prompt_ids
    yield _event(first)
    for delta, text in pieces:
        ids = byte_ids(text)
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": None}
        if body.get("logprobs"):
            choice["logprobs"] = _logprobs(ids)
        if with_ids:
            choice["token_ids"] = ids
        yield _event({**head, "choices": [choice]})
        await asyncio.sleep(0)
    yield _event({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": turn.finish_reason}]})
    if (body.get("stream_options") or {}).get("include_usage"):
        all_ids = [token for _, text in pieces for token in byte_ids(text)]
        yield _event({**head, "choices": [], "usage": _usage(prompt_ids, all_ids)})
    yield "data: [DONE]\n\n"


def _event(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload)}\n\n"
