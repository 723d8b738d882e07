"""A scripted teacher: an OpenAI-compatible chat-completions server whose answers a function writes.

Each example's `teacher.py` knows its task's reference solutions (GSM8K's calculations, the gold SQL,
the passage and answer) and answers the agent's calls as a competent policy would, in the agent's real
format: OpenAI tool calls or the text the agent parses. Driven through the unmodified agent with
`tether rollout --upstream URL`, it yields genuine traces to imitate (`tether train --from-run`).

    policy(request) -> Reply          request: the chat-completions body as the agent sent it
    raise NoReference("...")          the agent gets a 400 error with that message; the call is recorded
                                      as failed, so the rollout is no demonstration

`teacher_main(make_policy, description)` parses `--tasks/--host/--port/--url-file`, and
`serve_teacher(policy, host, port, url_file)` binds (127.0.0.1, a free port by default), writes its base URL
(`http://HOST:PORT/v1`) to stdout and to `--url-file`, and serves until stopped. Streaming requests get the
same answer as one content chunk, one chunk per tool call, and the final chunk.
"""

from __future__ import annotations

import argparse
import json
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

MODEL = "teacher"


class NoReference(Exception):
    """The teacher has no reference for this call's task; the message is what the agent sees."""


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]

    def openai(self) -> dict[str, Any]:
        return {
            "id": "call_" + uuid.uuid4().hex[:24],
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments)},
        }


@dataclass(frozen=True)
class Reply:
    content: str | None = None
    tool_calls: Sequence[ToolCall] = field(default_factory=tuple)

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.tool_calls else "stop"


Policy = Callable[[dict[str, Any]], Reply]


# -- what the teacher reads of a request -----------------------------------------------------------------


def message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def last_user_text(request: dict[str, Any]) -> str:
    users = [m for m in request.get("messages") or [] if m.get("role") == "user"]
    return message_text(users[-1]) if users else ""


def first_user_text(request: dict[str, Any]) -> str:
    users = [m for m in request.get("messages") or [] if m.get("role") == "user"]
    return message_text(users[0]) if users else ""


def tool_results(request: dict[str, Any]) -> list[str]:
    """The tool messages so far, in order."""
    return [message_text(m) for m in request.get("messages") or [] if m.get("role") == "tool"]


def offers_tool(request: dict[str, Any], name: str) -> bool:
    tools = request.get("tools") or []
    return any((tool.get("function") or {}).get("name") == name for tool in tools)


def read_tasks(path: Path) -> list[dict[str, Any]]:
    """A task file (JSON lines) as dicts; a one-line error if it cannot be read."""
    try:
        lines = path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]
    except (OSError, json.JSONDecodeError) as exc:
        raise SystemExit(f"teacher: cannot read the task file {path}: {exc}") from None


def normalize(text: str) -> str:
    return " ".join(text.split())


# -- the server ------------------------------------------------------------------------------------------


def _completion(reply: Reply, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [call.openai() for call in reply.tool_calls]
    return {
        "id": "chatcmpl-" + uuid.uuid4().hex[:24],
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def _chunks(completion: dict[str, Any]) -> Iterator[str]:
    base = {key: completion[key] for key in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = completion["choices"][0]
    message = choice["message"]
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": message["content"] or ""}]
    deltas += [
        {"tool_calls": [{"index": i, **call}]} for i, call in enumerate(message.get("tool_calls") or [])
    ]
    for delta in deltas:
        yield _sse({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    yield _sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]})
    yield "data: [DONE]\n\n"


def _sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload)}\n\n"


def _error(message: str, status: int = 400) -> JSONResponse:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": "no_reference"}}
    return JSONResponse(body, status_code=status)


def teacher_app(policy: Policy, model: str = MODEL) -> FastAPI:
    app = FastAPI(title="scripted teacher", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "teacher"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return _error("the body is not JSON")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error("expected a chat-completions body with 'messages'")
        try:
            reply = policy(body)
        except NoReference as exc:
            return _error(str(exc))
        completion = _completion(reply, str(body.get("model") or model))
        if body.get("stream"):
            return StreamingResponse(_chunks(completion), media_type="text/event-stream")
        return JSONResponse(completion)

    return app


def serve_teacher(
    policy: Policy, host: str = "127.0.0.1", port: int = 0, url_file: str | None = None
) -> None:
    """Serve `policy` on `host:port` until interrupted (see the module docstring)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    url = f"http://{host}:{sock.getsockname()[1]}/v1"
    if url_file:
        Path(url_file).write_text(url + "\n")
    print(url, flush=True)
    config = uvicorn.Config(teacher_app(policy), log_level="warning", timeout_graceful_shutdown=2)
    uvicorn.Server(config).run(sockets=[sock])


def teacher_main(make_policy: Callable[[list[dict[str, Any]]], Policy], description: str | None) -> None:
    """The command line of an example's teacher: `--tasks FILE` (the train split) and where to listen."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=Path, required=True, help="the training task file (tasks.py)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    parser.add_argument("--url-file", help="also write the base URL to this file once listening")
    args = parser.parse_args()
    serve_teacher(make_policy(read_tasks(args.tasks)), args.host, args.port, args.url_file)
