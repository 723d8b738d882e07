"""The distillation teacher over HTTP: a real gateway of the built-in engine on loopback as the teacher,
and scripted servers for the teachers that must be refused."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.helpers import serve_app
from tests.rigs import GatewayRig
from tether.adapters.transitions import Transition
from tether.trainer.distill import PROBE, Teacher, TeacherError, check_teacher, score_transitions


def scripted_teacher(answer: Callable[[list[int]], dict[str, Any]]) -> Starlette:
    async def completions(request: Request) -> JSONResponse:
        body = await request.json()
        return JSONResponse(answer(body["prompt"]))

    return Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])


def answer_with(decode: Callable[[int], str]) -> Callable[[list[int]], dict[str, Any]]:
    def answer(ids: list[int]) -> dict[str, Any]:
        entries = [None] + [{str(i): {"logprob": -1.0, "decoded_token": decode(i)}} for i in ids[1:]]
        return {"choices": [{"text": "", "prompt_logprobs": entries}]}

    return answer


def transition(prompt: list[int], response: list[int]) -> Transition:
    return Transition(
        rollout_id="r",
        task_id="t",
        group_id=None,
        attempt=1,
        call_index=0,
        agent=None,
        policy_version=0,
        prompt_ids=prompt,
        response_ids=response,
        response_logprobs=[0.0] * len(response),
        loss_mask=[1] * len(response),
    )


def test_the_built_in_engine_behind_the_gateway_teaches(engine_rig: GatewayRig, tiny_engine: Any) -> None:
    _, base_url, key = engine_rig.session()
    teacher = Teacher(url=base_url, api_key=key)
    check_teacher(teacher, tiny_engine.tokenizer)
    prompt, response = tiny_engine.encode("The teacher reads"), tiny_engine.encode(" every token twice")
    (scores,) = asyncio.run(score_transitions(teacher, [transition(prompt, response)]))
    expected = asyncio.run(tiny_engine.score(prompt + response))[len(prompt) - 1 :]
    assert len(scores) == len(response)
    assert max(abs(a - b) for a, b in zip(scores, expected, strict=True)) < 1e-5


def test_a_teacher_with_another_tokenizer_is_refused_naming_a_token(tiny_engine: Any) -> None:
    tokenizer = tiny_engine.tokenizer
    other = answer_with(lambda i: tokenizer.decode([i + 1]))  # ids shifted by one: another vocabulary
    with serve_app(scripted_teacher(other)) as url:
        with pytest.raises(TeacherError, match="does not share the student's tokenizer: the student's token"):
            check_teacher(Teacher(url=f"{url}/v1"), tokenizer)
    same = answer_with(lambda i: tokenizer.decode([i]))
    with serve_app(scripted_teacher(same)) as url:
        check_teacher(Teacher(url=f"{url}/v1"), tokenizer)
    assert len(tokenizer.encode(PROBE, add_special_tokens=False)) > 10


def test_a_teacher_without_prompt_logprobs_is_refused_saying_so(tiny_engine: Any) -> None:
    plain = scripted_teacher(lambda _: {"choices": [{"text": "hello", "logprobs": None}]})
    with serve_app(plain) as url:
        with pytest.raises(TeacherError, match="returned no prompt logprobs for the tokenizer probe"):
            check_teacher(Teacher(url=f"{url}/v1"), tiny_engine.tokenizer)


def test_a_teacher_whose_tokenizer_cannot_be_checked_is_refused(tiny_engine: Any) -> None:
    def undecoded(ids: list[int]) -> dict[str, Any]:
        entries = [None] + [{str(i): {"logprob": -1.0}} for i in ids[1:]]
        return {"choices": [{"text": "", "prompt_logprobs": entries}]}

    with serve_app(scripted_teacher(undecoded)) as url:
        with pytest.raises(TeacherError, match="gives no decoded_token with its prompt logprobs"):
            check_teacher(Teacher(url=f"{url}/v1"), tiny_engine.tokenizer)


def test_a_dead_teacher_fails_after_its_retries(tiny_engine: Any) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    teacher = Teacher(url=f"http://127.0.0.1:{port}/v1", retries=1, timeout_s=2)
    with pytest.raises(TeacherError, match=r"did not score rollout 'r' call 0: cannot reach it"):
        asyncio.run(score_transitions(teacher, [transition([1, 2], [3])]))
