"""A reward-model server over real HTTP on loopback: the documented contract, retries, and failures that
name the server's answer."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.helpers import serve_app
from tether.rewards import RemoteReward
from tether.runner.rewards import RewardError
from tether.store.records import Span

CALL = Span(
    rollout_id="ro-1",
    name="llm.chat",
    start_time=0.0,
    end_time=1.0,
    attributes={"request": {"messages": [{"role": "user", "content": "hi"}]}, "choices": [{"text": "5"}]},
    origin="gateway",
)


@contextmanager
def reward_server(*answers: Response) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []
    queue = list(answers)

    async def score(request: Request) -> Response:
        seen.append(await request.json())
        return queue.pop(0) if len(queue) > 1 else queue[0]

    with serve_app(Starlette(routes=[Route("/score", score, methods=["POST"])])) as url:
        yield f"{url}/score", seen


def test_the_server_gets_task_output_and_calls_and_its_rewards_count() -> None:
    with reward_server(JSONResponse({"rewards": {"correct": 1, "style": 0.5}})) as (url, seen):
        values = RemoteReward(url)({"q": "2+3", "reference": {"a": 5}}, "5", [CALL])
    assert values == {"correct": 1.0, "style": 0.5}
    assert seen == [
        {
            "task": {"q": "2+3", "reference": {"a": 5}},
            "output": "5",
            "calls": [{"request": {"messages": [{"role": "user", "content": "hi"}]}, "reply": "5"}],
            "agent_reported": [],
        }
    ]


def test_a_busy_server_is_retried_and_a_refusal_is_not() -> None:
    with reward_server(PlainTextResponse("busy", 503), JSONResponse({"reward": 0.25})) as (url, seen):
        assert RemoteReward(url)({}, "x", []) == {"reward": 0.25}
    assert len(seen) == 2
    with reward_server(PlainTextResponse("no such task", 400)) as (url, seen):
        with pytest.raises(RewardError, match="status 400: no such task"):
            RemoteReward(url)({}, "x", [])
    assert len(seen) == 1


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (JSONResponse({"score": 1}), "expected"),
        (JSONResponse({"reward": "high"}), "not a finite number"),
        (PlainTextResponse("ok"), "reward server"),
    ],
)
def test_an_answer_out_of_the_contract_fails_the_reward(answer: Response, says: str) -> None:
    with reward_server(answer) as (url, _):
        with pytest.raises(RewardError, match=says):
            RemoteReward(url, retries=0)({}, "x", [])


def test_a_dead_server_fails_the_reward_after_its_retries() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(RewardError, match="gave no reward .*ConnectError"):
        RemoteReward(f"http://127.0.0.1:{port}/score", retries=1)({}, "x", [])
