"""A scriptable OpenAI-compatible upstream on loopback, for gateway failure and attribution tests.

It answers like a vLLM server: token ids when asked for `return_token_ids`, logprobs when asked.
`behaviour` controls failures: fail the next N calls with a status, hang, or omit token ids. A request
with `"fake_nesting": N` is answered with an extra field nested N levels deep.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

WORDS = ["The", " answer", " is", " 42", "."]
TOKEN_IDS = [504, 3365, 314, 1777, 30]
LOGPROBS = [-0.5, -0.25, -0.125, -1.0, -0.0625]
PROMPT_IDS = [1, 9690, 198, 2]


@dataclass
class Behaviour:
    fail_next: int = 0
    fail_status: int = 503
    hang_s: float = 0.0
    with_ids: bool = True
    requests: list[dict[str, Any]] = field(default_factory=list)


def nested(depth: int) -> list[object]:
    """A JSON list `depth` levels deep."""
    value: list[object] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def _logprobs(kind: str, count: int) -> dict[str, Any]:
    if kind == "chat":
        return {
            "content": [
                {"token": WORDS[i], "logprob": LOGPROBS[i], "bytes": None, "top_logprobs": []}
                for i in range(count)
            ]
        }
    return {
        "tokens": WORDS[:count],
        "token_logprobs": LOGPROBS[:count],
        "top_logprobs": None,
        "text_offset": list(range(count)),
    }


def create_fake_upstream(behaviour: Behaviour) -> Starlette:
    async def handle(request: Request, kind: str) -> Response:
        body = await request.json()
        behaviour.requests.append(body)
        if behaviour.hang_s:
            await asyncio.sleep(behaviour.hang_s)
        if behaviour.fail_next > 0:
            behaviour.fail_next -= 1
            error = {"error": {"message": "upstream overloaded", "type": "server_error"}}
            return JSONResponse(error, status_code=behaviour.fail_status)
        ids = behaviour.with_ids and body.get("return_token_ids")
        wants_logprobs = bool(body.get("logprobs")) if kind == "chat" else body.get("logprobs") is not None
        if body.get("stream"):
            return StreamingResponse(_stream(kind, body, ids, wants_logprobs), media_type="text/event-stream")
        choice: dict[str, Any] = {
            "index": 0,
            "finish_reason": "stop",
            "logprobs": _logprobs(kind, len(WORDS)) if wants_logprobs else None,
        }
        if kind == "chat":
            choice["message"] = {"role": "assistant", "content": "".join(WORDS)}
        else:
            choice["text"] = "".join(WORDS)
        if ids:
            choice["token_ids"] = TOKEN_IDS
        response: dict[str, Any] = {
            "id": "cmpl-fake",
            "object": "chat.completion" if kind == "chat" else "text_completion",
            "created": 1,
            "model": body.get("model"),
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(PROMPT_IDS),
                "completion_tokens": len(WORDS),
                "total_tokens": len(PROMPT_IDS) + len(WORDS),
            },
        }
        if ids:
            response["prompt_token_ids"] = PROMPT_IDS
        if isinstance(body.get("fake_nesting"), int):  # an answer nested deeper than the store can keep
            response["nested"] = nested(body["fake_nesting"])
        return JSONResponse(response)

    async def chat(request: Request) -> Response:
        return await handle(request, "chat")

    async def completions(request: Request) -> Response:
        return await handle(request, "completions")

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/completions", completions, methods=["POST"]),
        ]
    )


async def _stream(kind: str, body: dict[str, Any], ids: bool, wants_logprobs: bool):  # noqa: ANN202
    obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
    for i, word in enumerate(WORDS):
        choice: dict[str, Any] = {"index": 0, "finish_reason": None}
        if kind == "chat":
            choice["delta"] = {"content": word} if i else {"role": "assistant", "content": word}
        else:
            choice["text"] = word
        if wants_logprobs:
            one = _logprobs(kind, 5)
            choice["logprobs"] = (
                {"content": [one["content"][i]]}
                if kind == "chat"
                else {
                    "tokens": [word],
                    "token_logprobs": [LOGPROBS[i]],
                    "top_logprobs": None,
                    "text_offset": [i],
                }
            )
        if ids:
            choice["token_ids"] = [TOKEN_IDS[i]]
        chunk: dict[str, Any] = {
            "id": "cmpl-fake",
            "object": obj,
            "created": 1,
            "model": body.get("model"),
            "choices": [choice],
        }
        if ids and i == 0:
            chunk["prompt_token_ids"] = PROMPT_IDS
        yield f"data: {json.dumps(chunk)}\n\n"
        await asyncio.sleep(0)
    final = {
        "id": "cmpl-fake",
        "object": obj,
        "created": 1,
        "model": body.get("model"),
        "choices": [
            {"index": 0, "finish_reason": "stop", **({"delta": {}} if kind == "chat" else {"text": ""})}
        ],
    }
    yield f"data: {json.dumps(final)}\n\n"
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = {
            "id": "cmpl-fake",
            "object": obj,
            "created": 1,
            "model": body.get("model"),
            "choices": [],
            "usage": {"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9},
        }
        yield f"data: {json.dumps(usage)}\n\n"
    yield "data: [DONE]\n\n"
