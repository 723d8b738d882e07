"""Scripted OpenAI-compatible servers for the prompt-search tests, real HTTP on loopback.

- the policy answers a task right only when the system prompt it receives names the task's topic
  (the `[topic]` prefix of the question), so the score of a prompt is known in advance;
- the optimizer answers from a script, in order, so the candidates a search makes are known.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.helpers import serve_app

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "prompt_agent"
TOPIC = re.compile(r"^\[(\w+)\]")


def _answers() -> dict[str, str]:
    table = {}
    for name in ("train.jsonl", "val.jsonl"):
        for line in (EXAMPLE / name).read_text().splitlines():
            task = json.loads(line)
            table[task["question"]] = task["reference"]["answer"]
    return table


def _completion(model: Any, content: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
    }


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


@dataclass
class Policy:
    requests: list[dict[str, Any]] = field(default_factory=list)
    answers: dict[str, str] = field(default_factory=_answers)

    def answer(self, body: dict[str, Any]) -> str:
        messages = body.get("messages") or []
        system = next((_text(m) for m in messages if m.get("role") == "system"), "")
        question = _text(messages[-1]) if messages else ""
        topic = TOPIC.match(question)
        if topic is None or topic.group(1) not in system.lower():
            return "I do not know."
        return self.answers.get(question, "I do not know.")


@dataclass
class Optimizer:
    """Answers each call with the next line of `script` (a string, or a function of the request)."""

    script: list[str | Callable[[dict[str, Any]], str]]
    requests: list[dict[str, Any]] = field(default_factory=list)

    def answer(self, body: dict[str, Any]) -> str:
        index = len(self.requests) - 1
        if index >= len(self.script):
            raise AssertionError(
                f"the optimizer script has {len(self.script)} answers; call {index + 1} came"
            )
        step = self.script[index]
        return step if isinstance(step, str) else step(body)


def _app(responder: Policy | Optimizer) -> Starlette:
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        responder.requests.append(body)
        try:
            content = responder.answer(body)
        except AssertionError as exc:
            return JSONResponse({"error": {"message": str(exc), "type": "invalid_request_error"}}, 400)
        return JSONResponse(_completion(body.get("model"), content))

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


@contextmanager
def serve(responder: Policy | Optimizer) -> Iterator[str]:
    """Serve it; yields its OpenAI base URL (ending in /v1)."""
    with serve_app(_app(responder)) as url:
        yield f"{url}/v1"


def prompt(text: str) -> str:
    """An optimizer answer that proposes `text`."""
    return f"Here it is.\n<new_prompt>\n{text}\n</new_prompt>"
