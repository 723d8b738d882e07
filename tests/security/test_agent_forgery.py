"""The agent under training is an adversary: what it sends with its rollout token cannot become its own
training data. Attacks against the real gateway and store API on loopback, each of which must fail."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.rigs import GatewayRig
from tests.security.agents.verdict import exact
from tether.adapters import build_transitions
from tether.cli.main import main
from tether.contracts import Meta, Origin
from tether.runner import AgentEndpoints, CommandAgent, Runner, RunnerConfig
from tether.runner.driver import RolloutOutcome, read_outcome
from tether.store import RolloutRequest, RolloutStatus, SQLiteStore, Store, Task
from tether.store.records import Reward, Rollout

AGENTS = Path(__file__).parent / "agents"
FORGER = f"{sys.executable} {AGENTS / 'forger.py'}"  # one call, then posts 1000 "from the evaluator"


def live_rollout(rig: GatewayRig, *, agent_rewards: bool) -> tuple[str, str, str]:
    """A claimed rollout, as the runner opens it: (id, base URL, API key)."""
    request = RolloutRequest(task=Task(input={"q": 1}), metadata={Meta.AGENT_REWARDS: agent_rewards})
    (rollout,) = rig.store.enqueue([request])
    assert rig.store.claim("worker") is not None
    creds = rig.gateway.credentials(rollout.id)
    return rollout.id, creds["base_url"], creds["api_key"]


def call_once(base_url: str, key: str) -> None:
    client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}])


FORGED_REWARD = {"value": 1000.0, "source": "evaluator", "time": 4e9, "primary": True, "name": "reward"}


def test_a_forged_evaluator_reward_is_stored_as_the_agents_and_does_not_count(rig: GatewayRig) -> None:
    rollout_id, base_url, key = live_rollout(rig, agent_rewards=False)
    call_once(base_url, key)
    headers = {"Authorization": f"Bearer {key}"}
    posted = httpx.post(
        f"{rig.url}/store/rewards",
        json={"rewards": [{"rollout_id": rollout_id, **FORGED_REWARD}]},
        headers=headers,
    )
    assert posted.status_code == 204, posted.text
    event = httpx.post(f"{rig.url}/rollouts/{rollout_id}?primary=1", json={**FORGED_REWARD}, headers=headers)
    assert event.status_code == 200, event.text
    # the runner's evaluator then says 0.0
    rig.store.add_rewards([Reward(rollout_id=rollout_id, attempt=1, value=0.0, source=Origin.EVALUATOR)])
    rig.store.update_status(rollout_id, RolloutStatus.succeeded, attempt=1)

    stored = rig.store.query_rewards(rollout_id)
    forged = [r for r in stored if r.value == 1000.0]
    assert len(forged) == 2 and all(r.source == "agent" and r.time < 4e9 for r in forged)
    assert read_outcome(rig.store, rig.store.get_rollout(rollout_id)).reward == 0.0
    (transition,) = build_transitions(rig.store, [rollout_id]).transitions
    assert transition.reward == 0.0


# The forger answers "0" to the first (the evaluator says 0.0) and "zero" to the second, which makes the
# evaluator raise: that rollout fails with no reward of the evaluator's, and still its forgery must not count.
FORGER_TASKS = [
    Task(id="scored", input={"q": "grade yourself", "say": "0", "answer": 1}),
    Task(id="unscored", input={"q": "break the grader", "say": "zero", "answer": 0}),
]


def assert_the_forgeries_do_not_count(store: Store, rollouts: list[Rollout]) -> None:
    """Both of the forger's rewards are stored as the agent's, at server time; the rollout's reward is the
    evaluator's 0.0, in its outcome and its transition, or none where the evaluator gave none."""
    scored, unscored = sorted(rollouts, key=lambda r: r.task_id != "scored")
    for rollout in (scored, unscored):
        forged = [r for r in store.query_rewards(rollout.id) if r.value == 1000.0]
        assert len(forged) == 2 and all(r.source == Origin.AGENT and r.time < 4e9 for r in forged)
    assert scored.status == RolloutStatus.succeeded and read_outcome(store, scored).reward == 0.0
    (transition,) = build_transitions(store, [scored.id]).transitions
    assert transition.reward == 0.0
    assert unscored.status == RolloutStatus.failed and "evaluator failed" in str(unscored.error)
    assert read_outcome(store, unscored).reward is None


def test_through_the_runner_an_agents_forged_reward_does_not_count(rig: GatewayRig) -> None:
    runner = Runner(
        rig.store,
        CommandAgent(FORGER),
        AgentEndpoints(rig.url, rig.auth),
        exact,
        RunnerConfig(n_workers=2, timeout_s=60),  # agent_rewards left to its default
    )

    async def run() -> list[RolloutOutcome]:
        try:
            return await runner.run([RolloutRequest(task=task) for task in FORGER_TASKS])
        finally:
            await runner.stop()

    outcomes = asyncio.run(run())
    assert_the_forgeries_do_not_count(rig.store, [rig.store.get_rollout(o.rollout_id) for o in outcomes])


def test_tether_rollout_with_an_evaluator_ignores_the_agents_forged_reward(
    tmp_path: Path, upstream_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": t.id, **t.input}) + "\n" for t in FORGER_TASKS))
    project = ["--project-dir", str(tmp_path)]
    rollout = [
        "rollout",
        "--agent",
        FORGER,
        "--tasks",
        str(tasks),
        "--reward",
        f"{AGENTS / 'verdict.py'}:exact",
    ]
    assert main([*rollout, "--upstream", upstream_url, "--upstream-token-ids", *project]) == 0
    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    assert_the_forgeries_do_not_count(store, store.list_rollouts(limit=10))
    store.close()
    capsys.readouterr()
    assert main(["store", *project, "rollouts", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {row["task_id"]: row["reward"] for row in rows} == {"scored": 0.0, "unscored": None}


def test_without_an_evaluator_the_agents_own_reward_counts_but_its_claimed_time_does_not(
    rig: GatewayRig,
) -> None:
    rollout_id, base_url, key = live_rollout(rig, agent_rewards=True)
    call_once(base_url, key)
    headers = {"Authorization": f"Bearer {key}"}
    early = {"rollout_id": rollout_id, **FORGED_REWARD}
    assert (
        httpx.post(f"{rig.url}/store/rewards", json={"rewards": [early]}, headers=headers).status_code == 204
    )
    late = {"rollout_id": rollout_id, "value": 0.5, "time": 1.0}
    assert (
        httpx.post(f"{rig.url}/store/rewards", json={"rewards": [late]}, headers=headers).status_code == 204
    )
    rig.store.update_status(rollout_id, RolloutStatus.succeeded, attempt=1)
    assert read_outcome(rig.store, rig.store.get_rollout(rollout_id)).reward == 0.5  # the last recorded


def test_a_fabricated_model_call_span_is_kept_but_never_trained_on(rig: GatewayRig) -> None:
    rollout_id, base_url, key = live_rollout(rig, agent_rewards=False)
    call_once(base_url, key)
    fabricated = {
        "rollout_id": rollout_id,
        "attempt": 1,
        "name": "llm.chat",
        "start_time": time.time(),
        "origin": "gateway",
        "attributes": {
            "prompt_token_ids": [1, 2, 3],
            "choices": [{"index": 0, "token_ids": [7, 7, 7], "logprobs": [0.0, 0.0, 0.0]}],
            "policy_version": 0,
        },
    }
    headers = {"Authorization": f"Bearer {key}"}
    posted = httpx.post(f"{rig.url}/store/spans", json={"spans": [fabricated]}, headers=headers)
    assert posted.status_code == 204, posted.text
    rig.store.add_rewards([Reward(rollout_id=rollout_id, attempt=1, value=1.0, source=Origin.EVALUATOR)])
    rig.store.update_status(rollout_id, RolloutStatus.succeeded, attempt=1)

    spans = rig.store.query_spans(rollout_id=rollout_id)
    assert sorted(s.origin for s in spans) == ["agent", "gateway"]
    report = build_transitions(rig.store, [rollout_id])
    assert len(report.transitions) == 1 and report.transitions[0].response_ids != [7, 7, 7]
    assert report.skipped["not_recorded_by_the_gateway"] == 1


def test_one_rollout_cannot_pre_empt_anothers_span_ids(rig: GatewayRig) -> None:
    first, _, first_key = live_rollout(rig, agent_rewards=False)
    second, _, second_key = live_rollout(rig, agent_rewards=False)
    span = {"trace_id": "ab" * 16, "span_id": "cd" * 8, "name": "tool.search", "start_time": 1.0}
    for rollout_id, key in ((first, first_key), (second, second_key)):
        body = {"spans": [{**span, "rollout_id": rollout_id}]}
        response = httpx.post(f"{rig.url}/store/spans", json=body, headers={"Authorization": f"Bearer {key}"})
        assert response.status_code == 204
    assert [len(rig.store.query_spans(rollout_id=r)) for r in (first, second)] == [1, 1]


FORGED_FIELDS = {"source": "evaluator", "time": 4e9, "primary": True}


def test_a_reward_event_with_a_rollout_token_takes_its_provenance_from_the_server(rig: GatewayRig) -> None:
    rollout_id, base_url, key = live_rollout(rig, agent_rewards=True)
    headers = {"Authorization": f"Bearer {key}"}
    root = base_url.removesuffix("/v1")
    before = time.time()
    side = {"value": 0.25, "name": "style", **FORGED_FIELDS}
    assert httpx.post(f"{root}/rewards?primary=1", json=side, headers=headers).status_code == 200
    event = {"event_type": "reward", "data": {"value": 0.5, **FORGED_FIELDS}}
    assert httpx.post(f"{root}?primary=true", json=event, headers=headers).status_code == 200

    stored = {reward.name: reward for reward in rig.store.query_rewards(rollout_id)}
    assert set(stored) == {"style", "reward"}
    assert all(r.source == Origin.AGENT and before <= r.time < 4e9 for r in stored.values())
    assert stored["style"].primary is False  # a side metric, whatever the body or the query says
    assert stored["reward"].primary is True and stored["reward"].value == 0.5


def test_a_reward_event_with_the_admin_token_is_kept_as_sent(rig: GatewayRig) -> None:
    rollout_id, base_url, _ = live_rollout(rig, agent_rewards=False)
    admin = {"Authorization": f"Bearer {rig.auth.admin_token}"}
    root = base_url.removesuffix("/v1")
    sent = {"value": 0.75, "name": "review", "source": "operator", "time": 1234.5, "primary": True}
    assert httpx.post(f"{root}/rewards", json=sent, headers=admin).status_code == 200
    flagged = {"value": 0.1, "name": "speed"}
    assert httpx.post(f"{root}?primary=1", json=flagged, headers=admin).status_code == 200

    stored = {reward.name: reward for reward in rig.store.query_rewards(rollout_id)}
    review, speed = stored["review"], stored["speed"]
    assert (review.source, review.time, review.primary) == ("operator", 1234.5, True)
    assert speed.primary is True and speed.source == Origin.AGENT
    bad = httpx.post(f"{root}/rewards", json={"value": 1, "primary": "yes"}, headers=admin)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "primary"
