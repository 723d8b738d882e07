"""A token belongs to one attempt, not to its rollout: whatever an agent leaves running after its attempt
ends (a detached background child with the agent's OPENAI_API_KEY) can neither call nor record anything,
in a retry of its rollout or in a later run. Attacks run through `tether rollout` with no sandbox, as a
user runs Tether; the agent is `agents/lingerer.py`. And what a live attempt's token records is recorded
as that attempt, whatever the request says."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gateway.fake_upstream import Behaviour
from tests.rigs import GatewayRig
from tether.adapters import build_transitions
from tether.cli.main import main
from tether.contracts import Origin
from tether.store import RolloutRequest, RolloutStatus, SQLiteStore, Task
from tether.store.records import Rollout

AGENTS = Path(__file__).parent / "agents"
LINGERER = f"{sys.executable} {AGENTS / 'lingerer.py'}"
CHILD_SAYS = "sent by the leftover child"  # in everything the child sends (lingerer.py)
CHAT = {"model": "policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.fixture
def lingering(tmp_path: Path) -> Iterator[Path]:
    """The directory the agents and their leftover children share; the children are killed afterwards."""
    shared = tmp_path / "shared"
    shared.mkdir()
    yield shared
    for pid_file in shared.glob("*.pid"):
        pid = int(pid_file.read_text())
        cmdline = Path(f"/proc/{pid}/cmdline")
        if cmdline.exists() and b"lingerer.py" not in cmdline.read_bytes():
            continue  # gone, and its pid taken by another process
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def rollout_args(tmp_path: Path, upstream: str, run: str, tasks: list[dict[str, Any]]) -> list[str]:
    """`tether rollout` of the lingering agent over `tasks`, one worker each, in run `run`."""
    path = tmp_path / f"{run}.jsonl"
    path.write_text("".join(json.dumps(task) + "\n" for task in tasks))
    args = ["rollout", "--agent", LINGERER, "--tasks", str(path), "--n-workers", str(len(tasks))]
    args += ["--upstream", upstream, "--upstream-token-ids", "--project-dir", str(tmp_path / "project")]
    return [*args, "--no-air", "--run", run, "--sandbox", "none"]  # the children it tests outlive no sandbox


def tether_rollout(
    tmp_path: Path, upstream: str, run: str, plan: str, shared: Path, *extra: str, **fields: str
) -> Rollout:
    """Run `tether rollout` on one task of `plan`; its rollout, as the store has it afterwards."""
    task = {"id": plan, "plan": plan, "dir": str(shared), **fields}
    assert main([*rollout_args(tmp_path, upstream, run, [task]), *extra]) == 0
    (rollout,) = run_rollouts(tmp_path, run)
    return rollout


def run_rollouts(tmp_path: Path, run: str) -> list[Rollout]:
    store = open_store(tmp_path)
    try:
        return store.list_rollouts(run=run, limit=10)
    finally:
        store.close()


def open_store(tmp_path: Path) -> SQLiteStore:
    return SQLiteStore(tmp_path / "project" / ".tether" / "store.db")


def recorded(store: SQLiteStore, rollout_id: str) -> str:
    """Everything the store holds of a rollout: its spans and rewards, as text."""
    spans = [span.model_dump(mode="json") for span in store.query_spans(rollout_id=rollout_id)]
    rewards = [reward.model_dump(mode="json") for reward in store.query_rewards(rollout_id)]
    return json.dumps({"spans": spans, "rewards": rewards})


def gateway_calls(store: SQLiteStore, rollout_id: str) -> list[tuple[int | None, str]]:
    """The model calls the gateway recorded for a rollout: (attempt, the prompt's text)."""
    spans = store.query_spans(rollout_id=rollout_id)
    return [(s.attempt, json.dumps(s.attributes)) for s in spans if s.origin == Origin.GATEWAY]


def refusals(report: dict[str, dict[str, Any]]) -> dict[str, tuple[int, str]]:
    """Each attack's status and error code (the body of a refusal is `{"error": {"code", ...}}`)."""
    seen = {}
    for way, result in report.items():
        try:
            code = json.loads(result["body"])["error"]["code"]
        except (ValueError, KeyError, TypeError):
            code = f"not a refusal: {result['body'][:200]}"
        seen[way] = (result["status"], code)
    return seen


OVER = (401, "attempt_over")
EXPIRED = (401, "token_expired")  # the store API's and the OTLP receiver's word for it
FOREIGN = (403, "forbidden")
# What the child of attempt 1 gets back, each way it tries, while attempt 2 runs.
REFUSED_DURING_THE_RETRY = {
    "the token's attempt's base URL": OVER,
    "the rollout's base URL": OVER,
    "the other attempt's base URL": FOREIGN,
    "bare /v1": OVER,
    "reward event": OVER,
    "store rewards": EXPIRED,
    "store spans": EXPIRED,
    "otlp on the rollout": EXPIRED,
    "otlp bare": EXPIRED,
    "heartbeat": EXPIRED,
}


def assert_the_child_was_refused_and_attempt_2_is_its_own(
    tmp_path: Path, shared: Path, rollout: Rollout, behaviour: Behaviour
) -> None:
    """The child ran while attempt 2 was running and every way in was refused; attempt 2's calls,
    rewards and transition are its agent's own, and nothing of the child's is anywhere."""
    assert (rollout.status, rollout.attempt_count) == (RolloutStatus.succeeded, 2)
    report = json.loads((shared / f"{rollout.id}.report.json").read_text())
    store = open_store(tmp_path)
    try:
        assert CHILD_SAYS not in recorded(store, rollout.id)
        calls = [text for attempt, text in gateway_calls(store, rollout.id) if attempt != 1]
        assert len(calls) == 1 and "attempt 2's own call" in calls[0]
        rewards = store.query_rewards(rollout.id)
        assert [(r.attempt, r.value, r.source) for r in rewards] == [(2, 0.25, Origin.AGENT)]
        (transition,) = build_transitions(store, [rollout.id]).transitions  # attempt 2's
        assert (transition.attempt, transition.reward) == (2, 0.25)
    finally:
        store.close()
    assert not any(CHILD_SAYS in json.dumps(request) for request in behaviour.requests)
    assert refusals(report) == REFUSED_DURING_THE_RETRY
    message = json.loads(report["the rollout's base URL"]["body"])["error"]["message"]
    assert f"attempt 1 of rollout {rollout.id} is over: a retry (attempt 2) replaced it" in message


def test_a_child_left_by_a_failed_attempt_can_neither_call_nor_record_as_its_retry(
    tmp_path: Path, upstream_url: str, behaviour: Behaviour, lingering: Path
) -> None:
    rollout = tether_rollout(tmp_path, upstream_url, "retried", "retry", lingering, "--max-attempts", "2")
    assert_the_child_was_refused_and_attempt_2_is_its_own(tmp_path, lingering, rollout, behaviour)
    store = open_store(tmp_path)
    try:
        (first, _) = gateway_calls(store, rollout.id)
        assert first[0] == 1 and "attempt 1's own call" in first[1]  # attempt 1 keeps its own call
        assert [a.status for a in store.list_attempts(rollout.id)] == ["failed", "succeeded"]
    finally:
        store.close()


def test_a_child_left_by_a_killed_run_cannot_call_into_the_resumed_run(
    tmp_path: Path, upstream_url: str, behaviour: Behaviour, lingering: Path
) -> None:
    """`kill -9` of a `tether rollout` leaves its agents' children running; the same command again
    resumes the run, and gives each rollout it lost a new attempt: none of the children gets into one."""
    tasks = [{"id": f"t{i}", "plan": "crash", "dir": str(lingering)} for i in range(2)]
    args = rollout_args(tmp_path, upstream_url, "resumed", tasks)
    first = subprocess.Popen(
        [sys.executable, "-m", "tether.cli.main", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    give_up = time.monotonic() + 120
    try:  # until each agent made its call and left its child
        while len(list(lingering.glob("*.ready"))) < len(tasks) and first.poll() is None:
            if time.monotonic() > give_up:
                break
            time.sleep(0.05)
    finally:
        first.kill()
        first.wait()
    assert len(list(lingering.glob("*.ready"))) == len(tasks), "the first run ended before its agents"

    assert main(args) == 0
    rollouts = run_rollouts(tmp_path, "resumed")
    assert len(rollouts) == len(tasks) and all(r.worker_losses == 1 for r in rollouts)
    for rollout in rollouts:
        assert_the_child_was_refused_and_attempt_2_is_its_own(tmp_path, lingering, rollout, behaviour)


FINISHED = (401, "rollout_finished")
# What the child of a finished rollout gets back, on its own rollout and on a rollout of a later run.
REFUSED_AFTER_THE_RUN = {
    "own rollout, the token's attempt's base URL": FINISHED,
    "own rollout, the rollout's base URL": FINISHED,
    "own rollout, the other attempt's base URL": FOREIGN,
    "own rollout, bare /v1": FINISHED,
    "own rollout, reward event": FINISHED,
    "own rollout, store rewards": EXPIRED,
    "own rollout, store spans": EXPIRED,
    "own rollout, otlp on the rollout": EXPIRED,
    "own rollout, otlp bare": EXPIRED,
    "own rollout, heartbeat": EXPIRED,
    "later rollout, the token's attempt's base URL": FOREIGN,
    "later rollout, the rollout's base URL": FOREIGN,
    "later rollout, the other attempt's base URL": FOREIGN,
    "later rollout, bare /v1": FINISHED,  # a bare /v1 call is the token's own rollout's
    "later rollout, reward event": FOREIGN,
    "later rollout, store rewards": EXPIRED,  # the token's own attempt is checked first
    "later rollout, store spans": EXPIRED,
    "later rollout, otlp on the rollout": FOREIGN,
    "later rollout, otlp bare": EXPIRED,
    "later rollout, heartbeat": EXPIRED,
}


def test_a_child_left_by_a_finished_rollout_cannot_reach_a_later_run(
    tmp_path: Path, upstream_url: str, behaviour: Behaviour, lingering: Path
) -> None:
    """A later run's rollouts are new ones: the child, which learnt where the later run's gateway is and
    which rollout it runs, is refused on its own finished rollout and on that one."""
    first = tether_rollout(tmp_path, upstream_url, "first", "finish", lingering)
    assert first.status == RolloutStatus.succeeded and (lingering / f"{first.id}.child.pid").exists()
    later = tether_rollout(tmp_path, upstream_url, "later", "later", lingering, after=first.id)
    assert later.status == RolloutStatus.succeeded and later.id != first.id

    report = json.loads((lingering / f"{first.id}.report.json").read_text())
    store = open_store(tmp_path)
    try:
        for rollout in (first, later):
            assert CHILD_SAYS not in recorded(store, rollout.id)
            assert store.query_rewards(rollout.id) == []
            assert [attempt for attempt, _ in gateway_calls(store, rollout.id)] == [1]  # the agent's own
    finally:
        store.close()
    assert not any(CHILD_SAYS in json.dumps(request) for request in behaviour.requests)
    assert refusals(report) == REFUSED_AFTER_THE_RUN


# -- what a live attempt's token records is that attempt's ----------------------------------------------


def second_attempt(rig: GatewayRig) -> tuple[str, str]:
    """A rollout whose attempt 1 failed and attempt 2 runs, and attempt 2's token."""
    (rollout,) = rig.store.enqueue([RolloutRequest(task=Task(input={"q": 1}), max_attempts=3)])
    assert rig.store.claim("w") is not None
    rig.store.update_status(rollout.id, RolloutStatus.failed, attempt=1)
    claim = rig.store.claim("w")
    assert claim is not None and claim.attempt.number == 2
    return rollout.id, rig.auth.rollout_token(rollout.id, 2)


def otlp_claiming(attempt: int) -> dict[str, Any]:
    """One OTLP/JSON span whose span and resource attributes both say it is `attempt`'s."""
    claim = [{"key": "tether.attempt", "value": {"intValue": str(attempt)}}]
    span = {"traceId": "ab" * 16, "spanId": f"{attempt:016x}", "name": f"otlp span {attempt}"}
    span |= {"kind": 1, "startTimeUnixNano": "1700000000000000000", "attributes": claim}
    return {"resourceSpans": [{"resource": {"attributes": claim}, "scopeSpans": [{"spans": [span]}]}]}


def test_what_an_attempts_token_records_is_that_attempts_whatever_the_body_says(rig: GatewayRig) -> None:
    rollout_id, token = second_attempt(rig)
    headers = {"Authorization": f"Bearer {token}"}

    def post(path: str, body: dict[str, Any]) -> httpx.Response:
        return httpx.post(rig.url + path, json=body, headers=headers, timeout=30)

    for claimed in (1, 3):  # the attempt before it, and one after
        named = {"rollout_id": rollout_id, "attempt": claimed}
        spans = {"spans": [{**named, "name": f"store span {claimed}", "start_time": 1.0}]}
        assert post("/store/spans", spans).status_code == 204
        rewards = {"rewards": [{**named, "value": float(claimed), "name": f"claimed {claimed}"}]}
        assert post("/store/rewards", rewards).status_code == 204
        assert post(f"/rollouts/{rollout_id}/v1/traces", otlp_claiming(claimed)).status_code == 200
    assert post(f"/rollouts/{rollout_id}", {"value": 0.5, "attempt": 1}).status_code == 200
    assert post(f"/rollouts/{rollout_id}/v1/chat/completions", CHAT).status_code == 200
    assert post(f"/rollouts/{rollout_id}/attempts/2/v1/chat/completions", CHAT).status_code == 200
    other = post(f"/rollouts/{rollout_id}/attempts/1/v1/chat/completions", CHAT)
    assert other.status_code == 403 and "attempt 2" in other.json()["error"]["message"]

    spans = rig.store.query_spans(rollout_id=rollout_id)
    assert len(spans) == 2 + 2 + 2  # the store API's, OTLP's, and the two model calls
    assert {span.attempt for span in spans} == {2}
    rewards = rig.store.query_rewards(rollout_id)
    assert len(rewards) == 3 and {reward.attempt for reward in rewards} == {2}
