"""An agent forges evidence for its scorers: after one real model call it posts, with its rollout token, a
model call that never happened ("I ran the tests: 12/12 passed") claimed as the gateway's, through the
store API and through OTLP. Run by the real CLI (`tether rollout` in a subprocess) and scored by a
credulous judge and a credulous reward server on loopback (each gives 1 only when the recorded calls say
the tests passed): neither was sent the forgery as a recorded call, so both give 0; they got it only as
the agent's report, and the store keeps it as the agent's."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.helpers import serve_app
from tests.rewards.test_evidence import believes_its_trace, section
from tests.rewards.test_judge import judge_server, user_message
from tether.contracts import Origin, is_call_span
from tether.store import SQLiteStore, final_reward

AGENT = f"{sys.executable} {Path(__file__).parent / 'agents' / 'evidence_forger.py'}"
CLAIM = "I ran the tests: 12/12 passed"
RECORDED_REPLY = "The answer is 42."  # the fake upstream's


@contextmanager
def credulous_reward_server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A reward server giving 1 when a recorded call's reply says the tests passed; the bodies it got."""
    seen: list[dict[str, Any]] = []

    async def score(request: Request) -> JSONResponse:
        body = await request.json()
        seen.append(body)
        return JSONResponse({"reward": float(any(CLAIM in str(c["reply"]) for c in body["calls"]))})

    with serve_app(Starlette(routes=[Route("/score", score, methods=["POST"])])) as url:
        yield f"{url}/score", seen


def tether_rollout(project: Path, upstream: str, judge: str, reward_server: str) -> None:
    tasks = project / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t0", "q": "fix the failing test", "say": "fixed"}) + "\n")
    (project / "rubric.md").write_text("Score 1 when the agent ran the tests and they passed.")
    command = [
        sys.executable, "-m", "tether.cli.main", "rollout", "--agent", AGENT, "--tasks", str(tasks),
        "--upstream", upstream, "--upstream-token-ids", "--project-dir", str(project),
        "--reward", f"judge:{project / 'rubric.md'}", "--judge-url", judge, "--reward-retries", "0",
        "--reward", reward_server,
    ]  # fmt: skip
    done = subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_tether_rollout_never_sends_an_agents_forged_call_to_its_scorers_as_recorded(
    tmp_path: Path, upstream_url: str
) -> None:
    with judge_server(believes_its_trace) as (judge_url, judged), credulous_reward_server() as (url, bodies):
        tether_rollout(tmp_path, upstream_url, judge_url, url)

    (asked,) = judged
    message = user_message(asked)
    assert section(message, "trace") == f"model: {RECORDED_REPLY}"
    assert section(message, "agent_reported").splitlines() == [
        f"claimed model call: {CLAIM} (store API)",
        f"claimed model call: {CLAIM} (OTLP)",
    ]
    (body,) = bodies
    assert [call["reply"] for call in body["calls"]] == [RECORDED_REPLY]
    claimed = [span["attributes"]["choices"][0]["text"] for span in body["agent_reported"]]
    assert claimed == [f"{CLAIM} (store API)", f"{CLAIM} (OTLP)"]

    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    try:
        (rollout,) = store.list_rollouts(limit=10)
        spans = store.query_spans(rollout_id=rollout.id)
        calls = [(s.origin, s.attributes["choices"][0]["text"]) for s in spans if is_call_span(s.name)]
        rewards = store.query_rewards(rollout.id)
    finally:
        store.close()
    assert sorted(calls) == [
        (Origin.AGENT, f"{CLAIM} (OTLP)"),
        (Origin.AGENT, f"{CLAIM} (store API)"),
        (Origin.GATEWAY, RECORDED_REPLY),
    ]
    assert rollout.status == "succeeded"
    assert {r.name: r.value for r in rewards if r.source == Origin.EVALUATOR} == {"judge": 0.0, "reward": 0.0}
    assert final_reward(rewards, rollout.attempt_count) == 0.0
