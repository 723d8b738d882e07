"""Nothing of an earlier attempt reaches the next. A careless evaluator, judge or reward server says what it
expected when an answer is wrong (`expected 7006652, got '0'`); the attempt fails with those words, and
the rollout is retried. The hostile agent `agents/retry_reader.py` answers "0", and on its retry reads
everything its token can reach (its rollout, attempts, spans and rewards through the store API, the
dashboard API, the resources) for `expected NUMBER`: it finds nothing, answers "0" again and scores
nothing, sandboxed or not, through `tether rollout --max-attempts 2`. The words stay with the attempt
they belong to, for the operator: the admin token and the dashboard read them."""

from __future__ import annotations

import html
import json
import re
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.helpers import serve_app
from tests.security.agents.answer_check import given_answer
from tether.cli.main import main
from tether.compose import create_app
from tether.gateway import Gateway, GatewayConfig
from tether.store import RolloutStatus, SQLiteStore
from tether.store.auth import TokenAuthority
from tether.store.records import Rollout

AGENTS = Path(__file__).parent / "agents"
READER = f"{sys.executable} {AGENTS / 'retry_reader.py'}"
RUN = "leaks"


def tagged(text: str, tag: str) -> str:
    found = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", text, re.DOTALL)
    return html.unescape(found.group(1)) if found else ""


def create_judge() -> Starlette:
    """A judge that, for a wrong answer, says what the right one is and gives no score."""

    async def chat(request: Request) -> Response:
        prompt = (await request.json())["messages"][-1]["content"]
        expected = str(json.loads(tagged(prompt, "task"))["reference"]["answer"])
        answer = given_answer(tagged(prompt, "agent_output"))
        reply = "SCORE: 1" if answer == expected else f"The agent said {answer!r}, but expected {expected}."
        message = {"role": "assistant", "content": reply}
        return JSONResponse({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def create_reward_server() -> Starlette:
    """A reward server that refuses a wrong answer with what it expected."""

    async def score(request: Request) -> Response:
        body = await request.json()
        expected, answer = str(body["task"]["reference"]["answer"]), given_answer(body["output"])
        if answer == expected:
            return JSONResponse({"reward": 1.0})
        return PlainTextResponse(f"expected {expected}, got {answer!r}", status_code=422)

    return Starlette(routes=[Route("/score", score, methods=["POST"])])


@pytest.fixture
def judge_url() -> Iterator[str]:
    with serve_app(create_judge()) as url:
        yield url + "/v1"


@pytest.fixture
def reward_server_url() -> Iterator[str]:
    with serve_app(create_reward_server()) as url:
        yield url + "/score"


def scoring(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> list[str]:
    """The options that score the rollouts with `kind`, each failing a wrong answer with what it expected."""
    if kind == "evaluator":
        return ["--reward", f"{AGENTS / 'answer_check.py'}:strict"]
    if kind == "judge":
        rubric = tmp_path / "rubric.md"
        rubric.write_text("1 for the task's reference answer, else 0.\n")
        judge = request.getfixturevalue("judge_url")
        return ["--reward", f"judge:{rubric}", "--judge-url", judge, "--reward-retries", "0"]
    return ["--reward", request.getfixturevalue("reward_server_url"), "--reward-retries", "0"]


def run_reader(tmp_path: Path, upstream_url: str, answer: str, *extra: str) -> Rollout:
    """`tether rollout --max-attempts 2` of the reader on one task whose reference is `answer`."""
    tasks = tmp_path / "tasks.jsonl"
    task = {"id": "t0", "question": "the code?", "reference": {"answer": answer}}
    tasks.write_text(json.dumps(task) + "\n")
    args = ["rollout", "--agent", READER, "--tasks", str(tasks), "--max-attempts", "2", "--run", RUN]
    args += ["--upstream", upstream_url, "--upstream-token-ids", "--project-dir", str(tmp_path / "project")]
    assert main([*args, "--no-air", *extra]) == 1  # no rollout succeeded
    store = open_store(tmp_path)
    try:
        (rollout,) = store.list_rollouts(run=RUN, limit=10)
        return rollout
    finally:
        store.close()


def open_store(tmp_path: Path) -> SQLiteStore:
    return SQLiteStore(tmp_path / "project" / ".tether" / "store.db")


def as_the_operator(tmp_path: Path, rollout_id: str) -> str:
    """What the admin token reads of a rollout's attempts, through the store API and the dashboard."""
    store = open_store(tmp_path)
    auth = TokenAuthority.generate()
    try:
        with serve_app(create_app(Gateway(store, auth, GatewayConfig()))) as url:
            headers = {"Authorization": f"Bearer {auth.admin_token}"}
            seen = [
                httpx.get(f"{url}{path}", headers=headers, timeout=30)
                for path in (f"/store/rollouts/{rollout_id}/attempts", f"/ui/api/rollouts/{rollout_id}")
            ]
    finally:
        store.close()
    assert [response.status_code for response in seen] == [200, 200]
    return " ".join(response.text for response in seen)


UNSANDBOXED = ("--sandbox", "none")
KINDS = [
    pytest.param("evaluator", UNSANDBOXED, id="evaluator"),
    pytest.param("judge", UNSANDBOXED, id="judge"),
    pytest.param("reward server", UNSANDBOXED, id="reward server"),
    pytest.param("evaluator", ("--sandbox", "bwrap"), id="evaluator, sandboxed", marks=pytest.mark.bwrap),
]


@pytest.mark.parametrize(("kind", "sandbox"), KINDS)
def test_a_retry_reads_nothing_of_what_failed_its_earlier_attempt(
    kind: str, sandbox: tuple[str, ...], tmp_path: Path, upstream_url: str, request: pytest.FixtureRequest
) -> None:
    answer = str(1_000_000 + secrets.randbelow(9_000_000))
    rollout = run_reader(tmp_path, upstream_url, answer, *scoring(kind, tmp_path, request), *sandbox)

    assert (rollout.status, rollout.attempt_count) == (RolloutStatus.failed, 2)
    report = json.loads(rollout.output or "")  # the retry's: what it read, and its answer
    assert (report["attempt"], report["answer"]) == (2, "0")
    assert seen_routes(report) == read_by_a_token(rollout.id)
    seen = json.loads(report["seen"][f"/store/rollouts/{rollout.id}"][1])  # its rollout, running
    assert (seen["status"], seen["output"], seen["error"], seen["ended_at"]) == ("running", None, None, None)
    assert answer not in json.dumps(report["seen"])
    store = open_store(tmp_path)
    try:
        assert all(reward.value == 0.0 for reward in store.query_rewards(rollout.id))
        errors = [attempt.error or "" for attempt in store.list_attempts(rollout.id)]
    finally:
        store.close()
    assert len(errors) == 2 and all(f"expected {answer}" in error for error in errors)
    assert as_the_operator(tmp_path, rollout.id).count(f"expected {answer}") >= 2


def seen_routes(report: dict[str, Any]) -> dict[str, int | str]:
    return {path: status for path, (status, _) in report["seen"].items()}


def read_by_a_token(rollout_id: str) -> dict[str, int | str]:
    """What each route the reader tries answers its token: only its own rollout, and the model list."""
    return {
        f"/store/rollouts/{rollout_id}": 200,
        f"/store/rollouts/{rollout_id}/attempts": 403,
        f"/store/rollouts/{rollout_id}/rewards": 403,
        f"/store/spans?rollout_id={rollout_id}": 403,
        f"/store/spans?rollout_id={rollout_id}&attempt=1": 403,
        "/store/rollouts": 403,
        f"/ui/api/rollouts/{rollout_id}": 401,
        f"/ui/api/rollouts/{rollout_id}/transitions": 401,
        f"/rollouts/{rollout_id}/v1/models": 200,
        "POST /store/rollouts/read": 403,
        "POST /store/rollouts/wait": 403,
        "POST /store/rollouts/query": 403,
        "/store/resources": 200,
    }
