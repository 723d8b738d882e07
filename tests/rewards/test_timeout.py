"""A judge and a reward-model server that answer slower than `--reward-timeout`, through `tether rollout`
against real servers on loopback: each call is retried `--reward-retries` times, then the rollout's
reward fails with an error naming the timeout, and no reward (no silent 0) is stored."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.gateway.fake_upstream import Behaviour, create_fake_upstream
from tests.helpers import serve_app
from tether.cli.main import main
from tether.contracts import JUDGE_SPAN, Origin, is_call_span
from tether.store import RolloutStatus, SQLiteStore

AGENT = Path(__file__).parents[1] / "cli" / "agents" / "openai_call_agent.py"
TIMEOUT_S = 0.3
RETRIES = 2
SLOW_S = 30.0  # how long the servers take to answer, unless released first (at teardown)


@contextmanager
def slow_servers() -> Iterator[tuple[str, list[str]]]:
    """A judge (`/v1/chat/completions`) and a reward server (`/score`) that would give a valid score,
    but only after SLOW_S seconds; the paths of the requests they got, in order."""
    seen: list[str] = []
    released = threading.Event()

    async def slowly(request: Request) -> None:
        seen.append(request.url.path)
        await request.body()
        deadline = time.monotonic() + SLOW_S
        while not released.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    async def chat(request: Request) -> JSONResponse:
        await slowly(request)
        return JSONResponse({"choices": [{"message": {"role": "assistant", "content": "Good.\nSCORE: 1"}}]})

    async def score(request: Request) -> JSONResponse:
        await slowly(request)
        return JSONResponse({"reward": 1.0})

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/score", score, methods=["POST"]),
        ]
    )
    with serve_app(app) as url:
        try:
            yield url, seen
        finally:
            released.set()  # the calls still waiting end, before the server stops


def rollout(tmp_path: Path, *reward: str) -> SQLiteStore:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t0", "q": "What is 2 + 3?"}) + "\n")
    with serve_app(create_fake_upstream(Behaviour())) as upstream:
        args = ["rollout", "--agent", f"{sys.executable} {AGENT}", "--tasks", str(tasks)]
        args += ["--upstream", f"{upstream}/v1", "--upstream-token-ids", "--project-dir", str(tmp_path)]
        args += [*reward, "--reward-timeout", str(TIMEOUT_S), "--reward-retries", str(RETRIES)]
        main(args)
    return SQLiteStore(tmp_path / ".tether" / "store.db")


@pytest.mark.parametrize("kind", ["judge", "http"])
def test_a_reward_source_slower_than_the_timeout_fails_the_reward_after_its_retries(
    tmp_path: Path, kind: str
) -> None:
    (tmp_path / "rubric.md").write_text("Score 1 when the agent answered the question.")
    with slow_servers() as (url, seen):
        if kind == "judge":
            reward = ["--reward", f"judge:{tmp_path / 'rubric.md'}", "--judge-url", f"{url}/v1"]
        else:
            reward = ["--reward", f"{url}/score"]
        started = time.monotonic()
        store = rollout(tmp_path, *reward)
        took = time.monotonic() - started
    assert took < SLOW_S  # the calls were cut at the timeout, not waited out
    path = "/v1/chat/completions" if kind == "judge" else "/score"
    assert seen == [path] * (RETRIES + 1)  # the first call and each retry, no more

    (done,) = store.list_rollouts(limit=10)
    assert done.status is RolloutStatus.failed
    assert done.error is not None
    assert f"timed out after {TIMEOUT_S:g} s (--reward-timeout" in done.error, done.error
    assert f"after {RETRIES + 1} tries" in done.error, done.error
    assert store.query_rewards(done.id) == []  # no silent 0 stands in for the missing score

    spans = store.query_spans(rollout_id=done.id, limit=100)
    assert [s.name for s in spans if is_call_span(s.name)] == ["llm.chat"]  # the agent's call, kept
    judged = [s for s in spans if s.name == JUDGE_SPAN]
    if kind == "judge":  # every try recorded as the judge's own failed span, with why
        assert len(judged) == RETRIES + 1
        for span in judged:
            assert span.origin == Origin.JUDGE and span.status == "error"
            assert span.status_message is not None and "timed out" in span.status_message
            assert span.attributes["score"] is None and span.attributes["reply"] is None
    else:
        assert judged == []
