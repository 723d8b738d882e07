"""An OpenAI-compatible chat upstream on loopback that answers with a scripted reply: text, tool calls or
both, streaming or not, with token ids and logprobs for every piece as vLLM gives them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.helpers import serve_app
from tests.rigs import GatewayRig, make_rig

PROMPT_IDS = [1, 7, 11, 2]
FIRST_TOKEN_ID = 500


@dataclass
class ScriptedCall:
    call_id: str
    name: str
    argument_pieces: list[str]

    @property
    def arguments(self) -> str:
        return "".join(self.argument_pieces)


@dataclass
class Script:
    text_pieces: list[str] = field(default_factory=lambda: ["Hello", " there", "."])
    reasoning_pieces: list[str] = field(default_factory=list)  # a reasoning model's thinking, first
    calls: list[ScriptedCall] = field(default_factory=list)
    finish_reason: str | None = None  # default: "tool_calls" with calls, else "stop"
    stop_reason: str | None = None  # vLLM's matched stop string
    pause_s: float = 0.0  # between streamed tokens
    requests: list[dict[str, Any]] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.text_pieces)

    def pieces(self) -> list[str]:
        calls = [piece for call in self.calls for piece in call.argument_pieces]
        return self.reasoning_pieces + self.text_pieces + calls

    def token_ids(self) -> list[int]:
        return [FIRST_TOKEN_ID + i for i in range(len(self.pieces()))]

    def logprobs(self) -> list[float]:
        return [-0.125 * (i + 1) for i in range(len(self.pieces()))]

    def finish(self) -> str:
        return self.finish_reason or ("tool_calls" if self.calls else "stop")


def _logprob_entries(pieces: list[str], values: list[float]) -> dict[str, Any]:
    return {
        "content": [
            {"token": piece, "logprob": value, "bytes": None, "top_logprobs": []}
            for piece, value in zip(pieces, values, strict=True)
        ]
    }


def _usage(script: Script) -> dict[str, int]:
    count = len(script.pieces())
    return {
        "prompt_tokens": len(PROMPT_IDS),
        "completion_tokens": count,
        "total_tokens": len(PROMPT_IDS) + count,
    }


def _tool_calls(script: Script) -> list[dict[str, Any]]:
    return [
        {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in script.calls
    ]


def create_scripted_upstream(script: Script) -> Starlette:
    async def chat(request: Request) -> Response:
        body = await request.json()
        script.requests.append(body)
        if body.get("stream"):
            return StreamingResponse(_stream(script, body), media_type="text/event-stream")
        message: dict[str, Any] = {"role": "assistant", "content": script.text or None}
        if script.calls:
            message["tool_calls"] = _tool_calls(script)
        if script.reasoning_pieces:
            message["reasoning_content"] = "".join(script.reasoning_pieces)
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "finish_reason": script.finish(),
            "stop_reason": script.stop_reason,
            "logprobs": _logprob_entries(script.pieces(), script.logprobs())
            if body.get("logprobs")
            else None,
        }
        response: dict[str, Any] = {
            "id": "chatcmpl-scripted",
            "object": "chat.completion",
            "created": 1,
            "model": body.get("model"),
            "choices": [choice],
            "usage": _usage(script),
        }
        if body.get("return_token_ids"):
            choice["token_ids"] = script.token_ids()
            response["prompt_token_ids"] = PROMPT_IDS
        return JSONResponse(response)

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def _deltas(script: Script) -> Iterator[dict[str, Any]]:
    """One delta per token: thinking, text pieces, then each call's head and argument pieces."""
    for piece in script.reasoning_pieces:
        yield {"reasoning_content": piece}
    for piece in script.text_pieces:
        yield {"content": piece}
    for index, call in enumerate(script.calls):
        head = {"index": index, "id": call.call_id, "type": "function", "function": {"name": call.name}}
        yield {"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}], "head": True}
        for piece in call.argument_pieces:
            yield {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}


def _chunk(body: dict[str, Any], choice: dict[str, Any], **extra: Any) -> str:
    data = {
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": body.get("model"),
        "choices": [choice],
        **extra,
    }
    return f"data: {json.dumps(data)}\n\n"


async def _stream(script: Script, body: dict[str, Any]) -> AsyncIterator[str]:
    ids, values, pieces = script.token_ids(), script.logprobs(), script.pieces()
    yield _chunk(
        body, {"index": 0, "delta": {"role": "assistant", "content": ""}}, prompt_token_ids=PROMPT_IDS
    )
    position = 0
    for delta in _deltas(script):
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": None}
        if delta.pop("head", False):
            yield _chunk(body, choice)  # a call's id and name carry no token of their own here
            continue
        if body.get("return_token_ids"):
            choice["token_ids"] = [ids[position]]
        if body.get("logprobs"):
            choice["logprobs"] = _logprob_entries([pieces[position]], [values[position]])
        position += 1
        yield _chunk(body, choice)
        await asyncio.sleep(script.pause_s)
    finish = {"index": 0, "delta": {}, "finish_reason": script.finish(), "stop_reason": script.stop_reason}
    yield _chunk(body, finish)
    if (body.get("stream_options") or {}).get("include_usage"):
        yield f"data: {json.dumps({'id': 'chatcmpl-scripted', 'choices': [], 'usage': _usage(script)})}\n\n"
    yield "data: [DONE]\n\n"


def scripted_rig(tmp_path: Path, script: Script) -> Iterator[GatewayRig]:
    """A gateway over a real store whose `policy` upstream is the scripted server."""
    from tests.gateway.fake_upstream import Behaviour

    with serve_app(create_scripted_upstream(script)) as url:
        yield from make_rig(tmp_path, url + "/v1", Behaviour())
